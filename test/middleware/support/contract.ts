// Tools of the shared adapter suite: stores with a pausable acquire, independent counters of leases
// taken and given back, the store's own view of a bucket, a lease taken away behind the app's back,
// and HTTP clients that can leave at a chosen moment.
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import http from 'node:http'
import type { Redis } from 'ioredis'
import { afterEach } from 'vitest'
import { createMemoryStore, createRedisStore, createSemaphore, type Store } from '../../../src/index.js'
import { bucketName, GLOBAL_KEY } from '../../../src/admission/keys.js'
import { keySpace } from '../../../src/core/keys.js'
import type { LeaseEvent } from '../../../src/core/events.js'
import { dropPermitHolders } from '../../helpers/contract.js'
import { connectStandalone, uniquePrefix } from '../../helpers/redis.js'

export type StoreKind = 'memory' | 'redis'
export const STORE_KINDS: readonly StoreKind[] = ['memory', 'redis']

/** A store whose permit acquisitions can be held at the door (to let a client leave meanwhile). */
export interface TestStore {
  kind: StoreKind
  store: Store
  /** The store without the instrumentation (what a lease thief touches). */
  raw: Store
  client: Redis | undefined
  /** Hold every permit acquisition from now on until resume(). */
  pause(): void
  resume(): void
  /** Acquisitions that reached the store and have not answered yet. */
  readonly pendingAcquires: number
}

const opened: Store[] = []
afterEach(async () => {
  await Promise.all(opened.splice(0).map((store) => store.close()))
})

export function testStore(kind: StoreKind): TestStore {
  const client = kind === 'redis' ? connectStandalone() : undefined
  const raw = client
    ? createRedisStore(client, { prefix: uniquePrefix().slice(0, -1) })
    : createMemoryStore({ prefix: uniquePrefix().slice(0, -1) })
  opened.push(raw)
  let gate: Promise<void> | undefined
  let open: (() => void) | undefined
  let pending = 0
  const bind = (target: object, prop: string | symbol) => {
    const value: unknown = Reflect.get(target, prop, target)
    return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
  }
  const permits = new Proxy(raw.permits, {
    get(target, prop) {
      // Paused, the memory store has no synchronous path either: every acquisition waits at the gate.
      if (prop === 'acquireNow') return gate ? undefined : bind(target, prop)
      if (prop !== 'acquire') return bind(target, prop)
      return async (...args: Parameters<Store['permits']['acquire']>) => {
        pending++
        try {
          if (gate) await gate
          return await target.acquire(...args)
        } finally {
          pending--
        }
      }
    },
  })
  const store = new Proxy(raw, { get: (target, prop) => (prop === 'permits' ? permits : bind(target, prop)) })
  return {
    kind,
    store,
    raw,
    client,
    pause() {
      gate ??= new Promise((resolve) => (open = resolve))
    },
    resume() {
      open?.()
      gate = undefined
    },
    get pendingAcquires() {
      return pending
    },
  }
}

/** The store's view of a policy's global bucket: live holders and waiters. */
export function bucketStats(
  ts: TestStore,
  policy: string,
  key = GLOBAL_KEY,
): Promise<{ holders: number; queued: number }> {
  return createSemaphore(ts.raw, bucketName(policy, key), { permits: 1 }).stats()
}

/** Take the leases of a policy's global bucket away behind the app's back (a failover that lost
 * them): the next renewal finds them gone. */
export async function stealLeases(ts: TestStore, policy: string): Promise<void> {
  const space = keySpace(ts.raw.prefix, 'sem', bucketName(policy, GLOBAL_KEY))
  if (ts.client) await dropPermitHolders(ts.client, space)
  else (ts.raw.permits as unknown as { sets: Map<string, unknown> }).sets.delete(space.base)
}

/** Leases of one policy taken and given back, counted from the library's diagnostics channels (an
 * observer independent of the middleware's own counters). */
export class LeaseLedger {
  acquired = 0
  released = 0
  private readonly onAcquire = (message: unknown) => {
    const event = message as LeaseEvent
    if (this.mine(event) && event.outcome === 'acquired') this.acquired++
  }
  private readonly onRelease = (message: unknown) => {
    if (this.mine(message as LeaseEvent)) this.released++
  }

  constructor(readonly policy: string) {
    subscribe('tollgate:acquire', this.onAcquire)
    subscribe('tollgate:release', this.onRelease)
    ledgers.add(this)
  }

  private mine(event: LeaseEvent): boolean {
    return event.name.startsWith(`${this.policy}:`)
  }

  stop(): void {
    unsubscribe('tollgate:acquire', this.onAcquire)
    unsubscribe('tollgate:release', this.onRelease)
  }
}
const ledgers = new Set<LeaseLedger>()
afterEach(() => {
  for (const ledger of ledgers) ledger.stop()
  ledgers.clear()
})

export interface Answer {
  status: number
  headers: Headers
  body: string
}

export async function get(url: string, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await fetch(url, { headers })
  return { status: response.status, headers: response.headers, body: await response.text() }
}

/** A request on its own connection that the test can drop at any moment. */
export interface OpenRequest {
  /** Resolves with status and headers once they arrive. */
  readonly head: Promise<{ status: number; headers: http.IncomingHttpHeaders }>
  /** Resolves once `text` has arrived in the body. */
  received(text: string): Promise<void>
  /** Drop the connection (the client leaves). */
  destroy(): void
  /** Resolves when the exchange is over: `complete` false when the connection was cut first. */
  readonly done: Promise<{ complete: boolean; body: string }>
}

export function openRequest(url: string): OpenRequest {
  let body = ''
  const waiters: { text: string; resolve: () => void }[] = []
  let resolveHead!: (head: { status: number; headers: http.IncomingHttpHeaders }) => void
  const head = new Promise<{ status: number; headers: http.IncomingHttpHeaders }>((r) => (resolveHead = r))
  let resolveDone!: (done: { complete: boolean; body: string }) => void
  const done = new Promise<{ complete: boolean; body: string }>((r) => (resolveDone = r))
  const request = http.get(url, { agent: false }, (response) => {
    resolveHead({ status: response.statusCode ?? 0, headers: response.headers })
    response.setEncoding('utf8')
    response.on('data', (chunk: string) => {
      body += chunk
      for (const waiter of [...waiters]) {
        if (body.includes(waiter.text)) {
          waiters.splice(waiters.indexOf(waiter), 1)
          waiter.resolve()
        }
      }
    })
    response.on('end', () => resolveDone({ complete: response.complete, body }))
    response.on('error', () => resolveDone({ complete: false, body }))
    response.on('close', () => resolveDone({ complete: response.complete, body }))
  })
  request.on('error', () => resolveDone({ complete: false, body }))
  request.on('close', () => setImmediate(() => resolveDone({ complete: false, body })))
  return {
    head,
    received: (text) =>
      body.includes(text) ? Promise.resolve() : new Promise((resolve) => waiters.push({ text, resolve })),
    destroy: () => request.destroy(),
    done,
  }
}
