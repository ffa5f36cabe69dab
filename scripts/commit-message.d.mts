// Types of scripts/commit-message.mjs for the test that imports it.
export const MAX_SUBJECT: number
/** What is wrong with a commit message, in the committer's words; empty when nothing is. */
export function problems(message: string): string[]
/** [hash, message] of every commit after `rev` on HEAD, newest first. */
export function messagesSince(rev: string, cwd?: string): [string, string][]
