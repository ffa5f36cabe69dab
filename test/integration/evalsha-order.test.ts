// G11 whichever way the Lua runs: calls of one name take effect in the order they were made, also
// when the server lost the Lua in between, on FCALL (FUNCTION FLUSH) as on EVALSHA (SCRIPT FLUSH, for
// a user whose ACL refuses functions). Private servers: a flush is server-wide, and the shared ones
// serve other test files.
import { Cluster, Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import type { AcquireRequest } from '../../src/core/protocol/store.js'
import { SCRIPTS, type ScriptName, scriptSource } from '../../src/core/redis/scripts.js'
import {
  createMutex,
  createRedisStore,
  createSemaphore,
  type Lease,
  type Mutex,
  type RedisClient,
  type Store,
} from '../../src/index.js'
import { proxiedClient } from '../helpers/fault-proxy.js'
import { startGateProxy } from '../helpers/gate-proxy.js'
import { NODE_REDIS, nodeRedisClient, nodeRedisCluster } from '../helpers/node-redis.js'
import {
  type RedisClusterHandle,
  type RedisServerHandle,
  startCluster,
  startRedisServer,
} from '../helpers/redis-server.js'

let server: RedisServerHandle
let cluster: RedisClusterHandle
const clients: (Redis | Cluster)[] = []

/** Users that may do everything but functions (the store runs its Lua as EVALSHA), and also not
 * SCRIPT LOAD (a proxy that lacks it: the store puts a script on the server by its first EVAL). */
const NO_FUNCTIONS = ['on', '>secret', '~*', '&*', '+@all', '-function', '-fcall', '-fcall_ro']
const USERS = {
  FCALL: {},
  EVALSHA: { username: 'nofn', password: 'secret' },
  'EVALSHA without SCRIPT LOAD': { username: 'noload', password: 'secret' },
}

beforeAll(async () => {
  ;[server, cluster] = await Promise.all([startRedisServer(), startCluster(3)])
  // ACL users are per node.
  const nodes = [server, ...cluster.nodes].map(({ host, port }) => new Redis(port, host))
  await Promise.all(
    nodes.flatMap((node) => [
      node.call('ACL', 'SETUSER', 'nofn', ...NO_FUNCTIONS),
      node.call('ACL', 'SETUSER', 'noload', ...NO_FUNCTIONS, '-script|load'),
    ]),
  )
  await Promise.all(nodes.map((node) => node.quit()))
}, 60_000)

afterAll(async () => {
  for (const client of clients) client.disconnect()
  await Promise.all([server?.stop(), cluster?.stop()])
})

type Kind = 'standalone' | 'cluster'
type Mode = keyof typeof USERS

/** A client of `kind`, ready (a Cluster knows its masters), as the default user or one without functions. */
async function connect(kind: Kind, mode: Mode): Promise<Redis | Cluster> {
  const user = USERS[mode]
  const client =
    kind === 'standalone'
      ? new Redis({ host: server.host, port: server.port, ...user })
      : new Cluster(cluster.nodes, { redisOptions: user })
  clients.push(client)
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve))
  return client
}

/** A client for a store only, of the kind this run tests (node-redis under TOLLGATE_TEST_CLIENT). */
async function storeClient(kind: Kind, mode: Mode): Promise<RedisClient> {
  if (!NODE_REDIS) return connect(kind, mode)
  const user = USERS[mode]
  if (kind === 'standalone') return nodeRedisClient(server, 20, user)
  return nodeRedisCluster(cluster.nodes, (node) => node, user)
}

function masters(client: Redis | Cluster): Redis[] {
  return client instanceof Cluster ? client.nodes('master') : [client]
}

/** What the server forgets in each mode: the function libraries, or the script cache. */
async function flush(admin: Redis | Cluster, mode: Mode): Promise<void> {
  await Promise.all(
    masters(admin).map((node) => (mode === 'FCALL' ? node.call('FUNCTION', 'FLUSH') : node.script('FLUSH'))),
  )
}

/** Calls of commands on every master (INFO commandstats). */
async function calls(admin: Redis | Cluster, ...commands: string[]): Promise<number> {
  const counts = await Promise.all(
    masters(admin).map(async (node) => {
      const stats = await node.info('commandstats')
      return commands
        .map((command) => Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0))
        .reduce((sum, count) => sum + count, 0)
    }),
  )
  return counts.reduce((sum, count) => sum + count, 0)
}

const ROUNDS = 10

for (const kind of ['standalone', 'cluster'] as const) {
  for (const mode of ['EVALSHA', 'EVALSHA without SCRIPT LOAD', 'FCALL'] as const) {
    describe(`call order across a reload of the Lua [${kind}, ${mode}]`, () => {
      // After the flush the holder's acquire finds its script missing and goes again; then the release
      // and the try of one turn: the try must find the release done. (ioredis's own NOSCRIPT resend
      // put back the acquire's script alone: the release failed, the try ran, then the release.)
      it(`G11: after ${mode === 'FCALL' ? 'FUNCTION' : 'SCRIPT'} FLUSH, an un-awaited release() then tryAcquire() of the name finds it free, ${ROUNDS} of ${ROUNDS}`, async () => {
        const admin = await connect(kind, 'FCALL')
        const store = createRedisStore(await storeClient(kind, mode), {
          prefix: `order-${mode.replaceAll(' ', '-')}`,
        })
        const mutex = createMutex(store, kind)
        const scripts = ['evalsha', 'eval']
        const before = { scripts: await calls(admin, ...scripts), fcall: await calls(admin, 'fcall') }
        let granted = 0
        for (let round = 0; round < ROUNDS; round++) {
          await flush(admin, mode)
          const held = await mutex.tryAcquire()
          expect(held, `the holder, round ${round}`).toBeDefined()
          const released = held!.release() // not awaited: the try is made in the same turn
          const next = await mutex.tryAcquire()
          await released
          if (next) granted++
          await next?.release()
        }
        expect(granted).toBe(ROUNDS)
        // The calls ran the way this test is about (an FCALL refused by the ACL is not counted).
        const ran = (await calls(admin, ...scripts)) - before.scripts
        const fcalls = (await calls(admin, 'fcall')) - before.fcall
        expect(mode === 'FCALL' ? fcalls : ran).toBeGreaterThanOrEqual(4 * ROUNDS)
        expect(mode === 'FCALL' ? ran : fcalls).toBe(0)
        await store.close()
      })
    })
  }
}

// G11 when a server has some of the Lua and not the rest: a node where another process's reload is
// half done, or where only some of it ever ran. The calls of one name must still run in order: an
// un-awaited release() then tryAcquire() finds the mutex free (a release answered NOSCRIPT while the
// try made after it ran would leave the try busy).
async function releaseThenTry(mutex: Mutex, held: Lease | undefined) {
  expect(held, 'the holder').toBeDefined()
  const released = held!.release() // not awaited: the try is made in the same turn
  const next = await mutex.tryAcquire()
  await released
  await next?.release()
  const after = await mutex.tryAcquire() // free: the release ran (after the try, if that found it held)
  await after?.release()
  return { next: next !== undefined, after: after !== undefined }
}

/** Calls of `command` on `node` that failed (INFO commandstats). */
async function failedCalls(node: Redis, command: string): Promise<number> {
  const stats = await node.info('commandstats')
  return Number(new RegExp(`^cmdstat_${command}:.*failed_calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0)
}

describe('G11 with some of the Lua on a server [EVALSHA]', () => {
  it('cluster, SCRIPT LOAD refused, no loss: what ran on one master is not taken to be on another', async () => {
    const prefix = 'part-cl'
    const client = (await connect('cluster', 'EVALSHA without SCRIPT LOAD')) as Cluster
    const [first, second] = client.nodes('master')
    /** A mutex name whose keys live on `master`. */
    const nameOn = async (master: Redis) => {
      const port = `:${master.options.port}`
      for (let i = 0; ; i++) {
        const slot = (await master.call('CLUSTER', 'KEYSLOT', `${prefix}:{mutex:n${i}}:h`)) as number
        if (client.slots[slot]?.[0]?.endsWith(port)) return `n${i}`
      }
    }
    const noscript = async () => {
      const counts = await Promise.all(client.nodes('master').map((node) => failedCalls(node, 'evalsha')))
      return counts.reduce((sum, count) => sum + count, 0)
    }
    const store = createRedisStore(client, { prefix })
    const one = createMutex(store, await nameOn(first!))
    const two = createMutex(store, await nameOn(second!))
    const failedBefore = await noscript()
    const heldTwo = await two.tryAcquire() // the first call (functions refused: a reload), on master 2
    await (await one.tryAcquire())!.release() // acquire and release both ran on master 1
    expect(await releaseThenTry(two, heldTwo), 'the try made after the release').toEqual({
      next: true,
      after: true,
    })
    // Each master got the Lua by an EVAL, and none was sent an EVALSHA of Lua it never ran.
    expect((await noscript()) - failedBefore, 'EVALSHA answered NOSCRIPT').toBe(0)
    await store.close()
  })

  it('standalone, SCRIPT LOAD refused: after a second loss', async () => {
    const admin = (await connect('standalone', 'FCALL')) as Redis
    const store = createRedisStore(await storeClient('standalone', 'EVALSHA without SCRIPT LOAD'), {
      prefix: 'part-twice',
    })
    const mutex = createMutex(store, 'm')
    const held = await mutex.tryAcquire()
    const heldOther = await createMutex(store, 'p').tryAcquire()
    await (await createMutex(store, 'q').tryAcquire())!.release() // a release ran too
    await admin.script('FLUSH') // a restart with persistence: holds kept, scripts gone
    await heldOther!.release() // NOSCRIPT, a reload, then a release runs again
    await admin.script('FLUSH') // and again
    expect(await releaseThenTry(mutex, held), 'the try made after the release').toEqual({
      next: true,
      after: true,
    })
    await store.close()
  })

  for (const mode of ['EVALSHA', 'EVALSHA without SCRIPT LOAD'] as const) {
    it(`standalone [${mode}]: after SCRIPT FLUSH, another process put back the acquire's Lua only`, async () => {
      const admin = (await connect('standalone', 'FCALL')) as Redis
      const store = createRedisStore(await storeClient('standalone', mode), {
        prefix: `part-sa-${mode.replaceAll(' ', '-')}`,
      })
      const mutex = createMutex(store, 'm')
      await (await mutex.tryAcquire())!.release() // acquire and release both ran
      const held = await mutex.tryAcquire()
      await admin.script('FLUSH')
      // Another process's reload is half done: what the acquire runs is back, the rest not yet.
      await admin.script('LOAD', scriptSource('tgPermitAcquire'))
      expect(await releaseThenTry(mutex, held), 'the try made after the release').toEqual({
        next: true,
        after: true,
      })
      await store.close()
    })
  }

  it("standalone [EVALSHA], two stores: while the other's reload is half done", async () => {
    const prefix = 'part-two'
    const admin = (await connect('standalone', 'FCALL')) as Redis
    const gate = await startGateProxy(server.port)
    const otherClient = new Redis({ port: gate.port, host: '127.0.0.1', ...USERS.EVALSHA })
    try {
      const mine = createRedisStore(await storeClient('standalone', 'EVALSHA'), { prefix })
      const other = createRedisStore(otherClient, { prefix })
      const mutex = createMutex(mine, 'm')
      const elsewhere = createMutex(other, 'o')
      await (await mutex.tryAcquire())!.release()
      await (await elsewhere.tryAcquire())!.release()
      const held = await mutex.tryAcquire()
      await admin.script('FLUSH') // a restart with persistence: holds kept, scripts gone
      // The other store's next call finds its script gone and reloads; its link stalls once its
      // SCRIPT LOAD of the acquire's Lua ran.
      const stalled = gate.holdAfter('local function permit_acquire(KEYS')
      const otherCall = elsewhere.tryAcquire()
      await stalled
      // (My store's connection does not go through the gate.)
      const outcome = await releaseThenTry(mutex, held)
      gate.open()
      expect(outcome, 'the try made after the release').toEqual({ next: true, after: true })
      await (await otherCall)?.release()
      await Promise.all([mine.close(), other.close()])
    } finally {
      otherClient.disconnect()
      await gate.stop()
    }
  })
})

// Where SCRIPT LOAD is refused, a call that finds the Lua gone goes again as EVAL, which carries the
// whole of its family (53 KB for the permits): the first call of a family to each master does, and
// the calls behind it on its connection go as EVALSHA.
for (const kind of ['standalone', 'cluster'] as const) {
  it(`[${kind}, EVALSHA without SCRIPT LOAD] calls of many names after SCRIPT FLUSH: one EVAL per master`, async () => {
    const admin = await connect(kind, 'FCALL')
    const store = createRedisStore(await storeClient(kind, 'EVALSHA without SCRIPT LOAD'), {
      prefix: `one-eval-${kind}`,
    })
    const mutexes = Array.from({ length: 8 }, (_, i) => createMutex(store, `n${i}`))
    await Promise.all(mutexes.map(async (mutex) => (await mutex.tryAcquire())!.release()))
    await flush(admin, 'EVALSHA')
    const before = await calls(admin, 'eval')
    const leases = await Promise.all(mutexes.map((mutex) => mutex.tryAcquire()))
    expect(leases.filter((lease) => lease !== undefined)).toHaveLength(mutexes.length)
    expect((await calls(admin, 'eval')) - before).toBeLessThanOrEqual(masters(admin).length)
    await Promise.all(leases.map((lease) => lease?.release()))
    await store.close()
  })
}

// The exactly-once rules of the reload (reload.ts) on EVALSHA: of the calls that ran ahead of a
// failed one, only a release runs again. Another client loads the scripts between the two.
describe('exactly-once across a reload of the scripts [standalone, EVALSHA]', () => {
  const request = (token: string): AcquireRequest => ({
    token,
    ttlMs: 60_000,
    permits: 1,
    enqueue: false,
    waiterTtlMs: 5000,
  })
  const loadScripts = (client: Redis) =>
    Promise.all(
      (Object.keys(SCRIPTS) as ScriptName[]).map((name) => client.script('LOAD', scriptSource(name))),
    )

  async function setup(prefix: string): Promise<{ store: Store; client: Redis; admin: Redis }> {
    const admin = (await connect('standalone', 'FCALL')) as Redis
    const client = (await connect('standalone', 'EVALSHA')) as Redis
    const store = createRedisStore(client, { prefix })
    // The store's first call checks the version and finds functions refused; later calls leave at
    // once. A release and an acquire first, so that no script below is new to the connection.
    const warm = keySpace(prefix, 'sem', 'warm')
    await store.permits.acquire(warm, request('w'))
    await store.permits.release(warm, 'w', 1)
    return { store, client, admin }
  }

  it('a release that ran ahead of its NOSCRIPT acquire runs again after it: nothing stays held', async () => {
    const { store, client, admin } = await setup('es-race')
    const space = keySpace('es-race', 'sem', 'e')
    await admin.script('FLUSH')
    // On the store's connection, in this order: the acquire (NOSCRIPT: did not run), a load (as
    // another process would), the release (runs, and finds nothing to release).
    const acquired = store.permits.acquire(space, request('t2'))
    const loaded = loadScripts(client)
    const released = store.permits.release(space, 't2', 1)
    await Promise.all([acquired, released, loaded])
    expect((await acquired).granted).toBe(true)
    expect(await store.permits.inspect(space)).toMatchObject({ holders: 0 })
    await store.close()
  })

  it('a try-acquire refused while it ran ahead of a NOSCRIPT release is not granted by a second run', async () => {
    const { store, client, admin } = await setup('es-flip')
    const space = keySpace('es-flip', 'sem', 'g')
    expect((await store.permits.acquire(space, request('t0'))).granted).toBe(true)
    await admin.script('FLUSH')
    const released = store.permits.release(space, 't0', 1)
    const loaded = loadScripts(client)
    const acquired = store.permits.acquire(space, request('t3'))
    await Promise.all([released, loaded, acquired])
    expect((await acquired).granted).toBe(false)
    expect(await store.permits.inspect(space)).toMatchObject({ holders: 0 })
    await store.close()
  })

  it('many calls at once after SCRIPT FLUSH: one load of the scripts, each call runs once', async () => {
    const { store, admin } = await setup('es-many')
    const semaphore = createSemaphore(store, 'b', { permits: 3 })
    const held = await semaphore.acquire()
    await admin.script('FLUSH')
    const loadsBefore = await calls(admin, 'script\\|load')
    const leases = await Promise.all([semaphore.tryAcquire(), semaphore.tryAcquire(), semaphore.tryAcquire()])
    expect(leases.filter((lease) => lease !== undefined)).toHaveLength(2)
    // Each distinct script once (one per family).
    const scripts = new Set((Object.keys(SCRIPTS) as ScriptName[]).map((name) => scriptSource(name)))
    expect((await calls(admin, 'script\\|load')) - loadsBefore).toBe(scripts.size)
    expect((await semaphore.stats()).holders).toBe(3)
    await Promise.all([held, ...leases].map((lease) => lease?.release()))
    expect((await semaphore.stats()).holders).toBe(0)
    await store.close()
  })
})

// G12 on EVALSHA: a call that ran but whose reply was lost is resent by ioredis after the reconnect
// (the same command: no reload, the call ran): it has the effect of one, also when it was the EVAL of
// a call that found its script gone.
for (const kind of ['standalone', 'cluster'] as const) {
  describe(`exactly-once under a lost reply [${kind}, EVALSHA]`, () => {
    for (const flushed of [false, true]) {
      it(`G12: a resent acquire gives one lease with a fence > 0, and its release frees the name${flushed ? ' (after SCRIPT FLUSH)' : ''}`, async () => {
        const prefix = `es-once-${flushed}`
        const targets = kind === 'standalone' ? [server] : cluster.nodes
        const { client, proxies } = await proxiedClient(targets, kind === 'cluster', USERS.EVALSHA)
        clients.push(client)
        try {
          const store = createRedisStore(client, { prefix })
          const direct = createRedisStore(await storeClient(kind, 'EVALSHA'), { prefix })
          const mutex = createMutex(store, 'once')
          await (await mutex.acquire()).release() // functions refused: EVALSHA from here on
          if (flushed) await flush(await connect(kind, 'FCALL'), 'EVALSHA')
          // The acquire's own call: its EVALSHA; after the flush, the one it goes again as once the
          // scripts are loaded (the EVALSHA before it was refused, NOSCRIPT).
          const match = keySpace(prefix, 'mutex', 'once').key('h')
          const armed = flushed
            ? Promise.race(proxies.map((proxy) => proxy.waitForRequest('$4\r\nLOAD\r\n')))
            : Promise.resolve()
          const dropped = armed.then(() => Promise.race(proxies.map((proxy) => proxy.dropReply(match))))
          const lease = await mutex.acquire({ timeoutMs: 5000 })
          await dropped
          for (const proxy of proxies) proxy.disarm()
          expect(lease.fencingToken).toBeGreaterThan(0)
          expect(await createMutex(direct, 'once').tryAcquire()).toBeUndefined()
          await lease.release()
          const other = await createMutex(direct, 'once').tryAcquire()
          expect(other?.fencingToken).toBeGreaterThan(lease.fencingToken)
          await other?.release()
          await Promise.all([store.close(), direct.close()])
        } finally {
          client.disconnect()
          await Promise.all(proxies.map((proxy) => proxy.stop()))
        }
      })
    }
  })
}
