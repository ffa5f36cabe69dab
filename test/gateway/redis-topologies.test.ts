// The real `tollgate-gateway` bin against Redis set up as in production: TLS with client certificates
// (rediss:// and the --redis-tls-* files), a password from a file or the environment, and Sentinel
// through a failover under load. Every redis-server, redis-sentinel and gateway process is started
// for one test and stopped by its PID after it (also when it fails).
import { randomUUID } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { eventually, keysUnder, sleep } from '../helpers/contract.js'
import { baseFlags, metric, runGateway, spawnGateway } from '../helpers/gateway.js'
import { scriptCallCount } from '../helpers/redis.js'
import {
  clientTls,
  connectClient,
  makeTlsFiles,
  startPasswordRedisServer,
  startSentinel,
  startTlsRedisServer,
  stopAfterTest,
} from '../helpers/redis-extra.js'
import { REDIS_HOST, startRedisServer } from '../helpers/redis-server.js'
import { startUpstream } from '../helpers/upstream.js'

let dir: string
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'tollgate-topologies-'))
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

const newPrefix = () => `topo-${randomUUID().slice(0, 8)}`

async function get(url: string): Promise<{ status: number; body: string }> {
  const response = await fetch(url, { signal: AbortSignal.timeout(10_000) })
  return { status: response.status, body: await response.text() }
}

describe('Redis over TLS (rediss://, client certificates)', () => {
  it('admits through rediss:// with --redis-tls-ca/cert/key/servername, and its keys are in that Redis', async () => {
    const files = await makeTlsFiles()
    const redis = await startTlsRedisServer(files)
    const upstream = await startUpstream()
    const prefix = newPrefix()
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, prefix),
      ...['--redis', `rediss://${REDIS_HOST}:${redis.port}`],
      ...[
        '--redis-tls-ca',
        files.ca,
        '--redis-tls-cert',
        files.clientCert,
        '--redis-tls-key',
        files.clientKey,
      ],
      ...['--redis-tls-servername', 'localhost'],
      ...['--permits', '1', '--max-wait-ms', '200'],
    ])
    expect(await get(`${gateway.url}/work?ms=1`)).toEqual({ status: 200, body: 'ok /work' })

    // One permit: while /hold has it, the next request waits 200 ms and is refused.
    const held = get(`${gateway.url}/hold`)
    await eventually(() => upstream.probe.holders.length === 1)
    const client = connectClient({ host: REDIS_HOST, port: redis.port }, { tls: await clientTls(files) })
    const keys = await keysUnder(client, prefix)
    expect(keys.length).toBeGreaterThan(0)
    const refused = await get(`${gateway.url}/work?ms=1`)
    expect(refused.status).toBe(503)
    expect(JSON.parse(refused.body)).toMatchObject({ reason: 'timeout' })
    upstream.probe.holders.shift()!()
    expect((await held).status).toBe(200)
    expect((await get(`${gateway.url}/work?ms=1`)).status).toBe(200)
    expect(upstream.probe.max).toBe(1)
    expect(upstream.probe.entered).toBe(3)
    // The scripts ran on this server, over TLS.
    expect(await scriptCallCount(client)).toBeGreaterThan(0)
    expect((await fetch(`${gateway.adminUrl}/readyz`)).status).toBe(200)
  }, 30_000)

  it('fails closed (503 store_unavailable, /readyz 503) when it cannot verify the server or has no client certificate', async () => {
    const files = await makeTlsFiles()
    const redis = await startTlsRedisServer(files)
    const upstream = await startUpstream()
    const url = `rediss://${REDIS_HOST}:${redis.port}`
    const clientCert = ['--redis-tls-cert', files.clientCert, '--redis-tls-key', files.clientKey]
    const [untrusted, anonymous] = await Promise.all([
      // No --redis-tls-ca: the server's certificate is signed by nobody Node trusts.
      spawnGateway([...baseFlags(upstream.url, newPrefix()), '--redis', url, ...clientCert]),
      // Trusts the server, but shows no certificate: the server (tls-auth-clients yes) refuses it.
      spawnGateway([...baseFlags(upstream.url, newPrefix()), '--redis', url, '--redis-tls-ca', files.ca]),
    ])
    await Promise.all(
      [untrusted, anonymous].map(async (gateway) => {
        const refused = await get(`${gateway.url}/work?ms=1`)
        expect(refused.status).toBe(503)
        expect(JSON.parse(refused.body)).toMatchObject({ reason: 'store_unavailable' })
        expect((await fetch(`${gateway.adminUrl}/readyz`)).status).toBe(503)
        const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
        expect(metric(text, 'tollgate_store_errors_total', { route: 'default' })).toBeGreaterThan(0)
      }),
    )
    expect(upstream.probe.entered).toBe(0)
    // Why is in the log: the certificate chain for one, the handshake for the other.
    expect(untrusted.stderr()).toMatch(/certificate/i)
    expect(anonymous.logs().some((line) => (line.level as number) >= 40)).toBe(true)
  }, 30_000)

  it('exits 2 naming --redis-tls-key when --redis-tls-cert comes without it', async () => {
    const files = await makeTlsFiles()
    const run = runGateway([
      ...baseFlags('http://127.0.0.1:1', newPrefix()),
      ...['--redis', 'rediss://127.0.0.1:6380', '--redis-tls-cert', files.clientCert],
    ])
    expect(await run.exited).toEqual({ code: 2, signal: null })
    expect(run.stderr()).toContain('--redis-tls-key: a client certificate needs both cert and key')
    expect(run.stdout()).toBe('')
  }, 20_000)
})

describe('Redis password (never on the command line)', () => {
  it('authenticates with --redis-password-file and with TOLLGATE_REDIS_PASSWORD, and never prints the password', async () => {
    const secret = `s3cret-${randomUUID()}`
    const redis = await startPasswordRedisServer(secret)
    const passwordFile = path.join(dir, `password-${randomUUID()}`)
    await writeFile(passwordFile, `${secret}\n`, { mode: 0o600 })
    const upstream = await startUpstream()
    const prefix = newPrefix()
    const flags = [
      ...baseFlags(upstream.url, prefix),
      ...['--redis', `redis://${REDIS_HOST}:${redis.port}`, '--permits', '1', '--max-wait-ms', '200'],
    ]
    const [fromFile, fromEnv] = await Promise.all([
      spawnGateway([...flags, '--redis-password-file', passwordFile]),
      spawnGateway(flags, { env: { TOLLGATE_REDIS_PASSWORD: secret } }),
    ])
    expect(await get(`${fromFile.url}/work?ms=1`)).toEqual({ status: 200, body: 'ok /work' })
    expect(await get(`${fromEnv.url}/work?ms=1`)).toEqual({ status: 200, body: 'ok /work' })
    // Both share the one permit through that Redis: while one holds it, the other refuses.
    const held = get(`${fromFile.url}/hold`)
    await eventually(() => upstream.probe.holders.length === 1)
    const refused = await get(`${fromEnv.url}/work?ms=1`)
    expect(refused.status).toBe(503)
    expect(JSON.parse(refused.body)).toMatchObject({ reason: 'timeout' })
    upstream.probe.holders.shift()!()
    expect((await held).status).toBe(200)
    expect(upstream.probe.max).toBe(1)
    const client = connectClient({ host: REDIS_HOST, port: redis.port }, { password: secret })
    expect(await scriptCallCount(client)).toBeGreaterThan(0)

    // The configured password wins over a stale one in the URL (ioredis alone would let the URL win).
    const stale = await spawnGateway(
      [...baseFlags(upstream.url, prefix), '--redis', `redis://:stale-password@${REDIS_HOST}:${redis.port}`],
      { env: { TOLLGATE_REDIS_PASSWORD: secret } },
    )
    expect(await get(`${stale.url}/work?ms=1`)).toEqual({ status: 200, body: 'ok /work' })
    stale.kill()

    // Without the password the gateway refuses to start (exit 2), naming the problem, not a password.
    const without = runGateway(flags)
    expect(await without.exited).toEqual({ code: 2, signal: null })
    expect(without.stderr()).toMatch(/NOAUTH|WRONGPASS/)

    for (const gateway of [fromFile, fromEnv, without]) {
      expect(gateway.stdout()).not.toContain(secret)
      expect(gateway.stderr()).not.toContain(secret)
    }
  }, 30_000)
})

// ---------------------------------------------------------------------------------------------------
// Sentinel

const MASTER_NAME = 'mymaster'

/** SENTINEL replies list each instance as a flat [field, value, ...] array: as an object. */
function fields(reply: unknown): Record<string, string> {
  const flat = reply as string[]
  const out: Record<string, string> = {}
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!
  return out
}

async function masterPortSeenBy(sentinel: Redis): Promise<number> {
  const [, port] = (await sentinel.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', MASTER_NAME)) as string[]
  return Number(port)
}

/** The sentinel knows the replica (and holds it up) and the other sentinels. */
async function sentinelSees(sentinel: Redis, replicaPort: number, otherSentinels: number): Promise<boolean> {
  const replicas = ((await sentinel.call('SENTINEL', 'REPLICAS', MASTER_NAME)) as unknown[]).map(fields)
  const replica = replicas.find((r) => Number(r.port) === replicaPort)
  if (!replica || /s_down|o_down|disconnected/.test(replica.flags ?? '')) return false
  const peers = (await sentinel.call('SENTINEL', 'SENTINELS', MASTER_NAME)) as unknown[]
  return peers.length === otherSentinels
}

/** SENTINEL FAILOVER, again while the sentinel has not yet judged the replica fit (-NOGOODSLAVE). */
async function forceFailover(sentinel: Redis): Promise<void> {
  const deadline = Date.now() + 5_000
  for (;;) {
    try {
      expect(await sentinel.call('SENTINEL', 'FAILOVER', MASTER_NAME)).toBe('OK')
      return
    } catch (error) {
      if (!/NOGOODSLAVE/.test((error as Error).message) || Date.now() > deadline) throw error
      await sleep(200)
    }
  }
}

interface Outcome {
  start: number
  end: number
  /** HTTP status, or 0 for a request without a response (ran into its timeout, connection lost). */
  status: number
}

describe('Redis Sentinel', () => {
  it('keeps admitting through SENTINEL FAILOVER under load; the upstream never sees more than 2 x permits', async () => {
    const PERMITS = 4
    const LOOPS = 20
    const REQUEST_TIMEOUT_MS = 15_000
    // Without min-replicas-to-write, releases and grants written to the old master between the
    // promotion and the switch are lost, and the leases and waiters they ended stay on the new master
    // until they run out: ~9 s of no admissions here (up to ttlMs). With it, and NOREPLICAS resent,
    // admissions resume within a fraction of a second of the switch.
    const WAITER_TTL_MS = 10_000
    const TOLERANCE_MS = 2_000
    const SWITCH_BOUND_MS = 3_000
    // As operators should run a Sentinel master: it refuses writes (NOREPLICAS) once it has no
    // replica in sync, so nothing is written to it after its replica is promoted; the gateway resends
    // those calls to the new master (docs/gateway/operate.md, "Redis Sentinel").
    const master = stopAfterTest(
      await startRedisServer({ args: ['--min-replicas-to-write', '1', '--min-replicas-max-lag', '10'] }),
    )
    const replica = stopAfterTest(
      await startRedisServer({ args: ['--replicaof', REDIS_HOST, String(master.port)] }),
    )
    const replicaClient = connectClient(replica)
    await eventually(
      async () => /master_link_status:up/.test(await replicaClient.info('replication')),
      10_000,
      50,
    )
    const sentinels = await Promise.all(
      [0, 1, 2].map(() => startSentinel({ masterName: MASTER_NAME, masterPort: master.port, quorum: 2 })),
    )
    const sentinelClients = sentinels.map((sentinel) => connectClient(sentinel))
    await eventually(
      async () =>
        (await Promise.all(sentinelClients.map((c) => sentinelSees(c, replica.port, 2)))).every(Boolean),
      15_000,
      100,
    )

    const upstream = await startUpstream()
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, newPrefix()),
      ...['--redis-sentinel', sentinels.map((s) => `${REDIS_HOST}:${s.port}`).join(',')],
      ...['--redis-sentinel-name', MASTER_NAME, '--permits', String(PERMITS), '--ttl-ms', '5000'],
      ...['--max-wait-ms', '5000', '--max-queue', '1000', '--access-log-sample', '0'],
    ])
    const scriptsOnReplica = await scriptCallCount(replicaClient)

    // LOOPS clients, each sending one request after the other; the upstream holds each for 20 ms and
    // counts how many it has at once (probe.max), independently of the gateway.
    const outcomes: Outcome[] = []
    let running = true
    const loop = async () => {
      while (running) {
        const start = Date.now()
        let status = 0
        try {
          const response = await fetch(`${gateway.url}/work?ms=20`, {
            signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
          })
          await response.arrayBuffer()
          status = response.status
        } catch {
          status = 0
        }
        outcomes.push({ start, end: Date.now(), status })
        if (status !== 200) await sleep(20)
      }
    }
    const loadStarted = Date.now()
    const loops = Promise.all(Array.from({ length: LOOPS }, loop))
    try {
      await sleep(2_000)
      const maxBefore = upstream.probe.max
      const failoverAt = Date.now()
      await forceFailover(sentinelClients[0]!)
      await eventually(
        async () =>
          (await Promise.all(sentinelClients.map(masterPortSeenBy))).every((port) => port === replica.port),
        15_000,
        50,
      )
      const switchedAt = Date.now()
      const admittedAfter = () => outcomes.filter((o) => o.status === 200 && o.start >= switchedAt)
      await eventually(() => admittedAfter().length > 0, WAITER_TTL_MS + TOLERANCE_MS + 2_000, 50)
      await sleep(2_000)
      const stoppingAt = Date.now()
      running = false
      const finished = await Promise.race([
        loops.then(() => true),
        sleep(REQUEST_TIMEOUT_MS + 1_000).then(() => false),
      ])

      const firstAdmitted = Math.min(...admittedAfter().map((o) => o.end))
      const statuses: Record<number, number> = {}
      for (const o of outcomes) statuses[o.status] = (statuses[o.status] ?? 0) + 1
      const lastSecond = outcomes.filter((o) => o.start >= stoppingAt - 1_000)
      console.log(
        `sentinel failover under load: ${JSON.stringify({
          requests: outcomes.length,
          statuses,
          permits: PERMITS,
          maxInFlightBefore: maxBefore,
          maxInFlight: upstream.probe.max,
          failoverToSwitchMs: switchedAt - failoverAt,
          switchToFirstAdmittedMs: firstAdmitted - switchedAt,
          admittedInLastSecond: `${lastSecond.filter((o) => o.status === 200).length}/${lastSecond.length}`,
          loadMs: Date.now() - loadStarted,
        })}`,
      )

      // (c) Nothing hung: every loop came back, every request got an answer.
      expect(finished).toBe(true)
      expect(outcomes.filter((o) => o.status === 0)).toEqual([])
      expect(outcomes.every((o) => o.status === 200 || o.status === 503)).toBe(true)
      // (a) Admitted before the failover, again within the bound after the switch, and steadily after.
      expect(outcomes.some((o) => o.status === 200 && o.end < failoverAt)).toBe(true)
      expect(firstAdmitted - switchedAt).toBeLessThan(SWITCH_BOUND_MS)
      expect(lastSecond.filter((o) => o.status === 200).length).toBeGreaterThan(lastSecond.length / 2)
      // ... through the new master (the former replica), which now runs the gateway's scripts.
      expect(await scriptCallCount(replicaClient)).toBeGreaterThan(scriptsOnReplica)
      // (b) The cap held before the failover; after it at most one failover's worth of extra grants.
      expect(maxBefore).toBeLessThanOrEqual(PERMITS)
      expect(upstream.probe.max).toBeLessThanOrEqual(2 * PERMITS)
    } finally {
      running = false
      await loops
    }
  }, 40_000)
})
