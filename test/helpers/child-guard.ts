// Preloaded into every child started by spawnChild() (node --import): when the IPC channel to the
// parent closes, the parent is gone (even if it was SIGKILLed), so the child must not live on.
process.on('disconnect', () => process.exit(1))
