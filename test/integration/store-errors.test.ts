// What a user sees when things go wrong around the store: errors in the user's words with the cause
// attached, no noise on the console from a client the store owns, and no warning for a signal that
// many waits share.
import { afterEach, expect, it, vi } from 'vitest'
import {
  ConfigError,
  createMutex,
  createRedisStore,
  createSemaphore,
  StoreUnavailableError,
} from '../../src/index.js'
import { describeStores, keysUnder, REDIS_KINDS } from '../helpers/contract.js'
import { whilePromiseReplaced } from '../helpers/foreign-promise.js'
import { proxiedStore } from '../helpers/proxied.js'
import { connectStandalone, topology, uniquePrefix } from '../helpers/redis.js'
import { freePort } from '../helpers/redis-server.js'

afterEach(() => {
  vi.restoreAllMocks()
})

/** Sockets this process has open (net sockets, ioredis's among them). These tests come first in the
 * file: a store of a later test, to a server that is down, opens and drops sockets as it retries. */
const openSockets = () => process.getActiveResourcesInfo().filter((kind) => kind === 'TCPSocketWrap').length

it('a store from a URL on a live Redis: it connects the client itself, a waiter is woken by pub/sub, and close() ends its two connections', async () => {
  const { host, port } = topology().standalone
  const before = openSockets()
  const store = createRedisStore(`redis://${host}:${port}`, { prefix: uniquePrefix().slice(0, -1) })
  // Asked before the client is made: the calls wait for it.
  const mutex = createMutex(store, 'url')
  const held = await mutex.acquire({ timeoutMs: 2000 })
  const started = Date.now()
  const waiting = mutex.acquire({ timeoutMs: 5000 })
  setTimeout(() => void held.release(), 100)
  await (await waiting).release()
  // Woken by its grant, not found by a backoff re-check (those come at 1 s and more here).
  expect(Date.now() - started).toBeLessThan(900)
  await expect.poll(openSockets, { timeout: 2000 }).toBe(before + 2) // the store's connection and its subscriber
  await store.close()
  await expect.poll(openSockets, { timeout: 2000 }).toBe(before)
})

it('a store from a URL made while the app has replaced the global Promise (a polyfill) works', async () => {
  const { host, port } = topology().standalone
  const store = whilePromiseReplaced(() =>
    createRedisStore(`redis://${host}:${port}`, { prefix: uniquePrefix().slice(0, -1) }),
  )
  const held = await createMutex(store, 'foreign').acquire({ timeoutMs: 2000 })
  expect(held.fencingToken).toBeGreaterThan(0)
  await held.release()
  await store.close()
})

it('a store from a URL closed before its client is made: the client is ended once made, and calls say the store is closed', async () => {
  const { host, port } = topology().standalone
  const before = openSockets()
  const store = createRedisStore(`redis://${host}:${port}`)
  await store.close()
  await expect(createMutex(store, 'gone').tryAcquire()).rejects.toThrow('the store is closed')
  await expect.poll(openSockets, { timeout: 2000 }).toBe(before)
})

it('a store from a URL with Redis down: the error says what could not be done and why, with the cause; ioredis prints nothing', async () => {
  const printed = vi.spyOn(console, 'error').mockImplementation(() => {})
  const port = await freePort()
  const store = createRedisStore(`redis://127.0.0.1:${port}`, { commandTimeoutMs: 1000 })
  try {
    const error = await createMutex(store, 'orders')
      .acquire()
      .catch((caught: unknown) => caught)
    expect(error).toBeInstanceOf(StoreUnavailableError)
    const message = (error as Error).message
    expect(message).toMatch(/^Could not acquire "orders"/)
    expect(message).toContain('ECONNREFUSED')
    expect(message).toContain(`127.0.0.1:${port}`)
    expect(message).not.toMatch(/tg[A-Z]\w+/) // no internal script names
    expect((error as Error).cause).toBeInstanceOf(Error)
    expect(String(((error as Error).cause as Error).message)).toContain('ECONNREFUSED')
    expect(printed.mock.calls.flat().join(' ')).not.toContain('Unhandled error event')
  } finally {
    await store.close()
  }
})

it('a client that is not an ioredis Redis or Cluster is refused when the store is made', () => {
  for (const wrong of [{}, { isCluster: false, status: 'ready' }, new Map(), 'localhost:6379'])
    expect(() => createRedisStore(wrong as never)).toThrow(ConfigError)
})

for (const kind of REDIS_KINDS as ('standalone' | 'cluster')[]) {
  it(`a Redis older than 7.0 is refused at the first call, naming the version found and the one needed [${kind}]`, async () => {
    const direct = connectStandalone()
    const found = /^redis_version:(\S+)/m.exec(await direct.info('server'))![1]!
    const older = `6.${'9'.repeat(found.length - 2)}` // as long as the real one: RESP lengths stay right
    const proxied = await proxiedStore(kind, uniquePrefix().slice(0, -1))
    try {
      for (const proxy of proxied.proxies)
        proxy.rewriteReplies(`redis_version:${found}`, `redis_version:${older}`)
      const error = await createMutex(proxied.store, 'old')
        .tryAcquire()
        .catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(StoreUnavailableError)
      expect((error as Error).message).toContain(`Redis ${older} is too old`)
      expect((error as Error).message).toContain('Redis 7.0.0 or later')
      // Every later call too, and nothing was written.
      await expect(createSemaphore(proxied.store, 'old-sem', { permits: 2 }).acquire()).rejects.toThrow(
        'too old',
      )
      expect(await keysUnder(proxied.client, proxied.store.prefix)).toEqual([])
    } finally {
      await proxied.close()
    }
  })
}

describeStores('one AbortSignal for many waits', (fx) => {
  it('20 waiting acquires sharing one signal: no MaxListenersExceededWarning, and all of them abort', async () => {
    const warnings: Error[] = []
    const onWarning = (warning: Error) => warnings.push(warning)
    process.on('warning', onWarning)
    try {
      const mutex = createMutex(fx().store, 'shared-signal')
      const holder = await mutex.acquire()
      const controller = new AbortController()
      const waits = Array.from({ length: 20 }, () =>
        mutex.acquire({ signal: controller.signal, timeoutMs: 10_000 }).catch((error: unknown) => error),
      )
      await new Promise((resolve) => setTimeout(resolve, 100))
      controller.abort(new Error('gave up'))
      const outcomes = await Promise.all(waits)
      expect(outcomes.every((outcome) => (outcome as Error).message === 'gave up')).toBe(true)
      await new Promise((resolve) => setImmediate(resolve))
      expect(warnings.map((warning) => warning.name)).not.toContain('MaxListenersExceededWarning')
      await holder.release()
    } finally {
      process.off('warning', onWarning)
    }
  })
})
