// G11 whichever way the Lua runs: calls of one name take effect in the order they were made, also
// when the server lost the Lua in between, on FCALL (FUNCTION FLUSH) as on EVALSHA (SCRIPT FLUSH, for
// a user whose ACL refuses functions). Private servers: a flush is server-wide, and the shared ones
// serve other test files.
import { Cluster, Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import type { AcquireRequest } from '../../src/core/protocol/store.js'
import { SCRIPTS, type ScriptName, scriptSource } from '../../src/core/redis/scripts.js'
import { createMutex, createRedisStore, createSemaphore, type Store } from '../../src/index.js'
import { proxiedClient } from '../helpers/fault-proxy.js'
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
        const store = createRedisStore(await connect(kind, mode), {
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
    expect((await calls(admin, 'script\\|load')) - loadsBefore).toBe(Object.keys(SCRIPTS).length)
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
          const direct = createRedisStore(await connect(kind, 'EVALSHA'), { prefix })
          const mutex = createMutex(store, 'once')
          await (await mutex.acquire()).release() // functions refused: EVALSHA from here on
          if (flushed) await flush(await connect(kind, 'FCALL'), 'EVALSHA')
          // The acquire's own call: its EVALSHA; after the flush, the EVAL it goes again as (the
          // EVALSHA before it was refused, NOSCRIPT).
          const match = flushed ? '$4\r\neval\r\n' : keySpace(prefix, 'mutex', 'once').key('h')
          const dropped = Promise.race(proxies.map((proxy) => proxy.dropReply(match)))
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
