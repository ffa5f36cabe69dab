// The hostile edge against the real `tollgate-gateway` binary: shutdown leaves no lease behind, a Redis that is
// known down is answered fast (and logged once), and a Redis user without the rights the scripts need
// is refused at start with the ACL rule to grant.
import { Redis } from 'ioredis'
import { afterEach, describe, expect, it } from 'vitest'
import { aclRule } from '../../src/gateway/redis.js'
import { eventually, keysUnder, sleep } from '../helpers/contract.js'
import { startFaultProxy } from '../helpers/fault-proxy.js'
import { baseFlags, metric, redisUrl, runGateway, spawnGateway } from '../helpers/gateway.js'
import { rawConnect } from '../helpers/raw-http.js'
import { startRecorder } from '../helpers/recorder.js'
import { connectStandalone, connectTo, topology, uniquePrefix } from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

const privates: RedisServerHandle[] = []
afterEach(async () => {
  await Promise.all(privates.splice(0).map((server) => server.stop()))
})

describe('gateway process edge', () => {
  it('G14: SIGTERM gives open WebSockets the grace period, then leaves no key of its leases in Redis', async () => {
    const upstream = await startRecorder()
    const prefix = uniquePrefix().slice(0, -1)
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, prefix),
      '--redis',
      redisUrl(topology().standalone),
      '--permits',
      '10',
      '--shutdown-grace-ms',
      '800',
    ])
    const port = Number(new URL(gateway.url).port)
    const ws = await rawConnect(port)
    ws.write('GET /ws/echo HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n')
    await ws.waitFor(/101/)
    const held = await rawConnect(port)
    held.write('GET /hold HTTP/1.1\r\nHost: gw\r\n\r\n')
    await eventually(() => upstream.requests.some((r) => r.url === '/hold'))
    const redis = connectStandalone()
    expect((await keysUnder(redis, prefix)).length).toBeGreaterThan(0)
    gateway.kill('SIGTERM')
    await sleep(200)
    // Still within the grace period: the tunnel works.
    ws.write('still-there')
    await ws.waitFor(/still-there/)
    const exit = await gateway.exited
    expect(exit.code).toBe(0)
    // Both were cut at the end of the grace period, and their leases were given back before exit.
    expect(await keysUnder(redis, prefix)).toEqual([])
  }, 20_000)

  it('G14: SIGTERM stops the gateway also when the reader of its log has gone (writes fail with EPIPE)', async () => {
    const upstream = await startRecorder()
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
      '--shutdown-grace-ms',
      '500',
    ])
    expect((await fetch(`${gateway.url}/before`)).status).toBe(200)
    // A log shipper that dies, or `tollgate ... | head`: the gateway's next writes fail.
    gateway.closeOutput()
    expect((await fetch(`${gateway.url}/after`)).status).toBe(200) // its access line cannot be written
    gateway.kill('SIGTERM')
    // The grace period, then at most a bounded wait for the log: it exits on its own.
    const exit = await Promise.race([
      gateway.exited,
      sleep(8000).then(() => 'still running 8 s after SIGTERM'),
    ])
    expect(exit).toEqual({ code: 0, signal: null })

    // A second signal while a request holds the drain: exit now (1), also with nobody reading the log.
    const draining = await spawnGateway([
      ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
      '--shutdown-grace-ms',
      '30000',
    ])
    const held = await rawConnect(Number(new URL(draining.url).port))
    held.write('GET /hold HTTP/1.1\r\nHost: gw\r\n\r\n')
    await eventually(() => upstream.requests.filter((r) => r.url === '/hold').length === 1)
    draining.closeOutput()
    // Back to back (two signals: two SIGTERMs may merge into one), before its first log line has
    // even failed to be written.
    draining.kill('SIGTERM')
    draining.kill('SIGINT')
    const now = await Promise.race([
      draining.exited,
      sleep(8000).then(() => 'still running 8 s after the second signal'),
    ])
    expect(now).toEqual({ code: 1, signal: null })
  }, 30_000)

  for (const failOpen of [false, true]) {
    it(`G14: a Redis known down is answered at once${failOpen ? ' (through, with --fail-open)' : ' (503)'}, logged once, and /readyz ${failOpen ? 'stays ready' : 'says so'}`, async () => {
      const upstream = await startRecorder()
      const server = await startRedisServer()
      privates.push(server)
      const gateway = await spawnGateway([
        ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
        '--redis',
        server.url,
        '--command-timeout-ms',
        '500',
        ...(failOpen ? ['--fail-open'] : []),
      ])
      const call = async () => {
        const at = Date.now()
        const response = await fetch(`${gateway.url}/x`)
        await response.text()
        return { status: response.status, ms: Date.now() - at }
      }
      expect((await call()).status).toBe(200)
      server.kill('SIGKILL')
      await server.exited()
      const first = await call()
      expect(first.status).toBe(failOpen ? 200 : 503)
      expect(first.ms).toBeLessThan(500 + 400) // the one request that found out waited commandTimeoutMs
      const next = await Promise.all(Array.from({ length: 20 }, () => call()))
      expect(new Set(next.map((r) => r.status))).toEqual(new Set([failOpen ? 200 : 503]))
      expect(Math.max(...next.map((r) => r.ms))).toBeLessThan(200)
      const ready = await fetch(`${gateway.adminUrl}/readyz`)
      expect(ready.status).toBe(failOpen ? 200 : 503)
      const outageLines = () =>
        gateway.logs().filter((line) => String(line.msg).includes('store unavailable'))
      await eventually(() => outageLines().length > 0, 2000)
      expect(outageLines()).toHaveLength(1)
      await server.restart()
      await eventually(async () => (await call()).status === 200, 10_000, 100)
      await eventually(() =>
        gateway.logs().some((line) => String(line.msg).includes('store available again')),
      )
      const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
      expect(metric(text, 'tollgate_store_errors_total', { route: 'default' })).toBeGreaterThanOrEqual(21)
      expect(outageLines()).toHaveLength(1)
    }, 30_000)
  }

  it('a Redis older than 7.0 is refused at start (exit 2), naming the version found and the one needed', async () => {
    const upstream = await startRecorder()
    const found = /^redis_version:(\S+)/m.exec(await connectStandalone().info('server'))![1]!
    const older = `6.${'9'.repeat(found.length - 2)}`
    const proxy = await startFaultProxy(topology().standalone)
    try {
      proxy.rewriteReplies(`redis_version:${found}`, `redis_version:${older}`)
      const refused = runGateway([
        ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
        '--redis',
        `redis://127.0.0.1:${proxy.port}`,
      ])
      expect((await refused.exited).code).toBe(2)
      expect(refused.stderr()).toContain(`Redis ${older} is too old`)
      expect(refused.stderr()).toContain('Redis 7.0.0 or later')
    } finally {
      await proxy.stop()
    }
  })

  it('G10: a Redis user without channel rights is refused at start (exit 2) with the ACL rule to grant', async () => {
    const upstream = await startRecorder()
    const server = await startRedisServer()
    privates.push(server)
    const admin = connectTo(server)
    const prefix = 'edge'
    // No channels (the Redis 7 default for new users): releases could not PUBLISH their hand-offs.
    await admin.call('ACL', 'SETUSER', 'nochan', 'on', '>pw', `~${prefix}:*`, 'resetchannels', '+@all')
    const refused = runGateway([
      ...baseFlags(upstream.url, prefix),
      '--redis',
      `redis://nochan:pw@127.0.0.1:${server.port}`,
    ])
    expect((await refused.exited).code).toBe(2)
    // Its probe leaves nothing (before: the holder keys of a hand-off refused part-way, for 5 s).
    expect(await keysUnder(admin as Redis, prefix)).toEqual([])
    expect(refused.stderr()).toContain('ACL SETUSER')
    expect(refused.stderr()).toContain(`&${prefix}:*`)
    // Exactly the documented rule is enough.
    await admin.call(
      'ACL',
      'SETUSER',
      'gate',
      'on',
      '>pw',
      'resetkeys',
      'resetchannels',
      '-@all',
      ...aclRule(prefix).split(' '),
    )
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, prefix),
      '--redis',
      `redis://gate:pw@127.0.0.1:${server.port}`,
      '--permits',
      '1',
      '--max-wait-ms',
      '5000',
    ])
    const statuses = await Promise.all(
      Array.from({ length: 5 }, async () => (await fetch(`${gateway.url}/x?ms=30`)).status),
    )
    expect(statuses).toEqual([200, 200, 200, 200, 200]) // queued ones were handed over (PUBLISH)
    expect(gateway.stderr()).not.toContain('NOPERM')
    await eventually(async () => (await keysUnder(admin as Redis, prefix)).length === 0)
  }, 30_000)
})
