// Worker-side counterpart of child.ts, for scripts run in a child process. Must not import vitest.
import type { RedisTopology } from './redis-server.js'

export const TOPOLOGY_ENV = 'TOLLGATE_TEST_REDIS'

export interface ChildMessage {
  type: string
  [key: string]: unknown
}

/** The Redis topology the parent test passed in TOLLGATE_TEST_REDIS. */
export function workerTopology(): RedisTopology {
  const raw = process.env[TOPOLOGY_ENV]
  if (!raw) throw new Error(`${TOPOLOGY_ENV} is not set: run this file through spawnChild()`)
  return JSON.parse(raw) as RedisTopology
}

export function sendToParent(message: ChildMessage): void {
  if (!process.send) throw new Error('no IPC channel: run this file through spawnChild()')
  process.send(message)
}

export function onParentMessage(handler: (message: ChildMessage) => void): void {
  process.on('message', (message) => handler(message as ChildMessage))
}
