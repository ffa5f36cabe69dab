// Last-resort synchronous cleanup (kill spawned PIDs, remove temp dirs) when the current process
// exits or is interrupted. Used both in the vitest main process and in its fork workers.
const tasks = new Set<() => void>()
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const
let installed = false

// Last registered runs first, like releasing a stack of resources (kill a server, then remove its dir).
function runAll(): void {
  for (const task of [...tasks].reverse()) {
    tasks.delete(task)
    try {
      task()
    } catch {
      // best effort: one failing task must not stop the others
    }
  }
}

function install(): void {
  if (installed) return
  installed = true
  process.on('exit', runAll)
  // In a vitest fork worker the IPC channel to the main process closes when that process is gone
  // (e.g. after Ctrl-C): the worker may still be busy in a test, but what it spawned must go now.
  if (process.send) process.once('disconnect', runAll)
  for (const signal of SIGNALS) {
    process.once(signal, () => {
      runAll()
      // Nobody else handles it (vitest's main process does, a fork worker does not): die as the signal
      // would have made us die without our listener.
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal)
    })
  }
}

/**
 * Runs `task` synchronously if this process exits, gets SIGINT/SIGTERM/SIGHUP or loses its parent's IPC
 * channel; returns a function that unregisters it.
 */
export function onProcessExit(task: () => void): () => void {
  install()
  tasks.add(task)
  return () => {
    tasks.delete(task)
  }
}
