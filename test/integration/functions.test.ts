// How the Redis store runs its Lua: as a function library (FUNCTION LOAD once per server, then FCALL),
// loaded again when the server lost it, and as EVALSHA scripts when the server refuses functions. On
// private servers: the counts of INFO commandstats are exact there, and FUNCTION FLUSH disturbs nobody.
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import type { AcquireRequest } from '../../src/core/protocol/store.js'
import { functionLibraries } from '../../src/core/redis/scripts.js'
import { createMutex, createRedisStore, createSemaphore, type Store } from '../../src/index.js'
import { startGateProxy } from '../helpers/gate-proxy.js'
import { NODE_REDIS, nodeRedisClient } from '../helpers/node-redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

let server: RedisServerHandle
const clients: Redis[] = []

function connect(options: { username?: string; password?: string } = {}): Redis {
  const client = new Redis({ host: server.host, port: server.port, ...options })
  clients.push(client)
  return client
}

/** A client for a store, of the kind this run tests (node-redis under TOLLGATE_TEST_CLIENT), with a
 * way to send commands of its own on the store's connection. */
function storeClient(
  options: { username?: string; password?: string } = {},
  port = server.port,
): { client: Redis | ReturnType<typeof nodeRedisClient>; send(...args: string[]): Promise<unknown> } {
  if (!NODE_REDIS) {
    const client = new Redis({ host: server.host, port, ...options })
    clients.push(client)
    return { client, send: (command, ...args) => client.call(command, ...args) }
  }
  const client = nodeRedisClient({ host: server.host, port }, 20, options)
  return { client, send: (...args) => client.sendCommand(args) }
}

async function calls(admin: Redis, command: string): Promise<number> {
  const stats = await admin.info('commandstats')
  return Number(new RegExp(`^cmdstat_${command.replace('|', '\\|')}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0)
}

/** A user that may do everything but functions: the store runs its Lua as EVALSHA. */
const NOFN = { username: 'nofn', password: 'secret' }

beforeAll(async () => {
  server = await startRedisServer()
  const admin = connect()
  await admin.call(
    'ACL',
    'SETUSER',
    'nofn',
    'on',
    '>secret',
    '~*',
    '&*',
    '+@all',
    '-function',
    '-fcall',
    '-fcall_ro',
  )
})

afterAll(async () => {
  await Promise.all(clients.map((client) => client.quit().catch(() => client.disconnect())))
  await server?.stop()
})

describe('the store on a function library', () => {
  it('loads the libraries once, then runs every call as one FCALL', async () => {
    const admin = connect()
    await admin.call('FUNCTION', 'FLUSH')
    await admin.config('RESETSTAT')
    const store = createRedisStore(storeClient().client, { prefix: 'fn' })
    const mutex = createMutex(store, 'a')
    for (let i = 0; i < 5; i++) await (await mutex.acquire()).release()
    // The first call found no function, loaded both libraries, and ran again.
    expect(await calls(admin, 'function|load')).toBe(functionLibraries().length)
    expect(await calls(admin, 'fcall')).toBe(11)
    expect(await calls(admin, 'evalsha')).toBe(0)
    const listed = (await admin.call('FUNCTION', 'LIST')) as unknown[][]
    expect(listed.map((library) => library[1]).sort()).toEqual(
      functionLibraries()
        .map((l) => l.name)
        .sort(),
    )
    await store.close()
  })

  it('a server that lost the functions (restart without persistence, FUNCTION FLUSH): loaded again, no call fails or runs twice', async () => {
    const admin = connect()
    const store = createRedisStore(storeClient().client, { prefix: 'fn-flush' })
    const semaphore = createSemaphore(store, 'b', { permits: 3 })
    const held = await semaphore.acquire()
    await admin.call('FUNCTION', 'FLUSH')
    await admin.config('RESETSTAT')
    // Many calls at once find the function gone: one load, and each call then runs once.
    const leases = await Promise.all([semaphore.tryAcquire(), semaphore.tryAcquire(), semaphore.tryAcquire()])
    expect(leases.filter((lease) => lease !== undefined)).toHaveLength(2)
    expect(await calls(admin, 'function|load')).toBe(functionLibraries().length)
    expect((await semaphore.stats()).holders).toBe(3)
    await Promise.all([held, ...leases].map((lease) => lease?.release()))
    expect((await semaphore.stats()).holders).toBe(0)
    await store.close()
  })

  // A release sent while its acquire is on the way (a RedLock that gave up, a give-back after a
  // timeout) must run after it, also when the acquire found the functions gone and had to wait for
  // them: else the acquire, run last, holds a permit nobody releases until its lease runs out.
  const request = (token: string): AcquireRequest => ({
    token,
    ttlMs: 60_000,
    permits: 1,
    enqueue: false,
    waiterTtlMs: 5000,
  })

  async function warm(store: Store, prefix: string): Promise<void> {
    // The store's first call checks the server's version first; later calls leave at once.
    await store.permits.inspect(keySpace(prefix, 'sem', 'warm'))
  }

  it('keeps call order across a reload: a release made while its acquire waits for the functions runs after it', async () => {
    const admin = connect()
    const { client, send } = storeClient()
    const store = createRedisStore(client, { prefix: 'fn-order' })
    await warm(store, 'fn-order')
    const space = keySpace('fn-order', 'sem', 'd')
    await admin.call('FUNCTION', 'FLUSH')
    const acquired = store.permits.acquire(space, request('t1'))
    // PING on the store's connection answers after the acquire's "Function not found": the reload
    // has begun when the release is made.
    await send('PING')
    const released = store.permits.release(space, 't1', 1)
    await Promise.all([acquired, released])
    expect((await acquired).granted).toBe(true)
    expect(await store.permits.inspect(space)).toMatchObject({ holders: 0 })
    await store.close()
  })

  it('keeps call order when another client loads the functions between a failed call and a later one that ran', async () => {
    const admin = connect()
    const { client, send } = storeClient()
    const store = createRedisStore(client, { prefix: 'fn-race' })
    await warm(store, 'fn-race')
    const space = keySpace('fn-race', 'sem', 'e')
    await admin.call('FUNCTION', 'FLUSH')
    // On the store's own connection, in this order: the acquire (no function: it did not run), a
    // load (as another process would), the release (runs, and finds nothing to release).
    const acquired = store.permits.acquire(space, request('t2'))
    const loaded = Promise.all(functionLibraries().map((library) => send('FUNCTION', 'LOAD', library.code)))
    const released = store.permits.release(space, 't2', 1)
    await Promise.all([acquired, released, loaded])
    expect(await store.permits.inspect(space)).toMatchObject({ holders: 0 })
    await store.close()
  })

  // Only a release runs again after the calls before it: an acquire refused while it ran ahead of a
  // failed release must stay refused, not take what its caller was told it did not get.
  it('a try-acquire refused while it ran ahead of a failed release is not granted by a second run', async () => {
    const admin = connect()
    const { client, send } = storeClient()
    const store = createRedisStore(client, { prefix: 'fn-flip' })
    await warm(store, 'fn-flip')
    const space = keySpace('fn-flip', 'sem', 'g')
    expect((await store.permits.acquire(space, request('t0'))).granted).toBe(true)
    await admin.call('FUNCTION', 'FLUSH')
    // On the wire: the release (no function: did not run), a load, the try-acquire (runs: refused).
    const released = store.permits.release(space, 't0', 1)
    const loaded = Promise.all(functionLibraries().map((library) => send('FUNCTION', 'LOAD', library.code)))
    const acquired = store.permits.acquire(space, request('t3'))
    await Promise.all([released, loaded, acquired])
    expect((await acquired).granted).toBe(false)
    expect(await store.permits.inspect(space)).toMatchObject({ holders: 0 })
    await store.close()
  })

  it('an upgrade refused while it ran ahead of a failed read release is not granted by a second run', async () => {
    const admin = connect()
    const { client, send } = storeClient()
    const store = createRedisStore(client, { prefix: 'fn-up' })
    await warm(store, 'fn-up')
    const space = keySpace('fn-up', 'rw', 'u')
    const rw = (mode: 'read' | 'write', op: string) =>
      ({ token: 'own', op, mode, ttlMs: 60_000, enqueue: true, waiterTtlMs: 5000 }) as const
    expect((await store.rwlock.acquire(space, rw('read', 'a1'))).granted).toBe(true)
    await admin.call('FUNCTION', 'FLUSH')
    const released = store.rwlock.release(space, 'own', 'read', 'a1')
    const loaded = Promise.all(functionLibraries().map((library) => send('FUNCTION', 'LOAD', library.code)))
    const upgraded = store.rwlock.acquire(space, rw('write', 'a2'))
    await Promise.all([released, loaded, upgraded])
    expect(await upgraded).toMatchObject({ granted: false, refused: 'upgrade' })
    expect(await store.rwlock.inspect(space)).toMatchObject({ readers: 0, writer: false })
    await store.close()
  })

  it('a user whose ACL rule predates GETDEL (+getdel): releases still work and leave no key behind', async () => {
    const admin = connect()
    await admin.call('ACL', 'SETUSER', 'nogetdel', 'on', '>secret', '~*', '&*', '+@all', '-getdel')
    const { client } = storeClient({ username: 'nogetdel', password: 'secret' })
    const store = createRedisStore(client, { prefix: 'fn-getdel' })
    const mutex = createMutex(store, 'h')
    for (let i = 0; i < 3; i++) await (await mutex.acquire()).release()
    expect(await admin.keys('fn-getdel:*')).toEqual([])
    await store.close()
  })

  it('a user whose ACL refuses functions: the same calls run as EVALSHA scripts', async () => {
    const admin = connect()
    await admin.call('FUNCTION', 'FLUSH')
    await admin.config('RESETSTAT')
    const store = createRedisStore(storeClient(NOFN).client, { prefix: 'fn-acl' })
    const mutex = createMutex(store, 'c')
    const first = await mutex.acquire()
    expect(await mutex.tryAcquire()).toBeUndefined()
    await first.release()
    await (await mutex.acquire()).release()
    // The first call's FCALL was refused: it waited while the script of each family was loaded once,
    // and went again as EVALSHA; the four after it are one EVALSHA each. No call carries the Lua.
    expect({
      'function|load': await calls(admin, 'function|load'),
      'script|load': await calls(admin, 'script|load'),
      eval: await calls(admin, 'eval'),
      evalsha: await calls(admin, 'evalsha'),
      fcall: await calls(admin, 'fcall'),
    }).toEqual({
      'function|load': 0,
      'script|load': functionLibraries().length,
      eval: 0,
      evalsha: 5,
      fcall: 0,
    })
    await store.close()
  })

  it('after SCRIPT FLUSH: one SCRIPT LOAD per family, and each call one EVALSHA, the one that found its script gone too', async () => {
    const admin = connect()
    const store = createRedisStore(storeClient(NOFN).client, { prefix: 'fn-fast' })
    const mutex = createMutex(store, 'f')
    await (await mutex.acquire()).release() // functions refused: EVALSHA from here on
    await admin.script('FLUSH')
    await admin.config('RESETSTAT')
    for (let i = 0; i < 5; i++) await (await mutex.acquire()).release()
    // The first acquire: NOSCRIPT, the load, then EVALSHA again; each call after it: one EVALSHA.
    expect({
      'script|load': await calls(admin, 'script|load'),
      eval: await calls(admin, 'eval'),
      evalsha: await calls(admin, 'evalsha'),
    }).toEqual({ 'script|load': functionLibraries().length, eval: 0, evalsha: 11 })
    await store.close()
  })

  // The server loses the Lua again while the store's loads are on the way (a restart right after
  // another, a second flush): the calls that waited wait for the next load, in their order.
  for (const mode of ['FCALL', 'EVALSHA'] as const) {
    it(`[${mode}] G11, G3: lost again during the reload: a release that waited is not failed, and the try made after it finds the mutex free`, async () => {
      const admin = connect()
      const gate = await startGateProxy(server.port)
      const { client } = storeClient(mode === 'FCALL' ? {} : NOFN, gate.port)
      try {
        const store = createRedisStore(client, { prefix: `fn-twice-${mode}` })
        const mutex = createMutex(store, 'm')
        const held = await mutex.tryAcquire()
        expect(held).toBeDefined()
        const flush = () => (mode === 'FCALL' ? admin.call('FUNCTION', 'FLUSH') : admin.script('FLUSH'))
        await flush()
        // The store's reload: the load of the permit scripts reaches Redis, then its link stalls.
        const stalled = gate.holdAfter('local function permit_acquire(KEYS')
        const released = held!.release() // finds the Lua gone: waits for the reload
        await stalled
        await flush() // lost again, before the store's next command
        gate.open()
        const outcome = await released.then(
          () => 'released',
          (error: Error) => error.message,
        )
        const next = await mutex.tryAcquire()
        expect({ outcome, next: next !== undefined }).toEqual({ outcome: 'released', next: true })
        await next?.release()
        await store.close()
      } finally {
        if (client instanceof Redis) client.disconnect()
        else client.destroy()
        await gate.stop()
      }
    })
  }

  it('a call that finds its function missing after every load fails after 3 reloads, not never', async () => {
    const admin = connect()
    await admin.call('FUNCTION', 'FLUSH')
    // A library of the permit scripts' name without their functions (FUNCTION LOAD: "already exists").
    const permits = functionLibraries().find((library) => library.name.startsWith('tollgate_permits_'))
    await admin.call(
      'FUNCTION',
      'LOAD',
      `#!lua name=${permits!.name}\nredis.register_function('tg_impostor', function() return 1 end)`,
    )
    await admin.config('RESETSTAT')
    const store = createRedisStore(storeClient().client, { prefix: 'fn-bound' })
    await expect(createMutex(store, 'b').tryAcquire()).rejects.toThrow(/Function not found/)
    expect(await calls(admin, 'function|load')).toBe(3 * functionLibraries().length)
    await admin.call('FUNCTION', 'FLUSH')
    await store.close()
  })
})
