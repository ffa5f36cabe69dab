// Checks the real-Redis harness itself: the topology from the global setup, the client helpers,
// private servers that can be stopped and restarted, and child processes.
import net from 'node:net'
import { afterAll, describe, expect, it } from 'vitest'
import { spawnChild } from '../helpers/child.js'
import {
  commandCount,
  connectCluster,
  connectIndependent,
  connectStandalone,
  connectTo,
  topology,
  uniquePrefix,
} from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

function infoField(info: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(info)?.[1]?.trim()
}

/** Resolves with 'connected', or the connection error code (e.g. ECONNREFUSED). */
function probe(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' })
    socket.once('connect', () => {
      socket.destroy()
      resolve('connected')
    })
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message))
  })
}

describe('redis topology', () => {
  it('provides a standalone server that answers PING', async () => {
    expect(topology().standalone.port).toBeGreaterThan(0)
    expect(await connectStandalone().ping()).toBe('PONG')
  })

  it('provides a healthy 3-master cluster', async () => {
    const cluster = connectCluster()
    const info = await cluster.cluster('INFO')
    expect(infoField(info, 'cluster_state')).toBe('ok')
    expect(infoField(info, 'cluster_size')).toBe('3')
    expect(topology().cluster).toHaveLength(3)
    const masters = ((await cluster.cluster('NODES')) as string)
      .split('\n')
      .filter((l) => l.includes('master'))
    expect(masters).toHaveLength(3)
  })

  it('runs multi-key commands with a shared hash tag and rejects cross-slot ones', async () => {
    const cluster = connectCluster()
    const prefix = uniquePrefix()
    await cluster.mset(`{${prefix}x}a`, '1', `{${prefix}x}b`, '2')
    expect(await cluster.mget(`{${prefix}x}a`, `{${prefix}x}b`)).toEqual(['1', '2'])

    const keys = ['a', 'b', 'c', 'd'].map((k) => `${prefix}${k}`)
    const slots = await Promise.all(keys.map((key) => cluster.cluster('KEYSLOT', key) as Promise<number>))
    const other = keys[slots.findIndex((slot) => slot !== slots[0])]
    expect(other).toBeDefined()
    await expect(cluster.mset(keys[0]!, '1', other!, '2')).rejects.toThrow(/CROSSSLOT/)
  })

  it('provides three distinct independent servers', async () => {
    const ids = await Promise.all(
      [0, 1, 2].map(async (i) => infoField(await connectIndependent(i).info('server'), 'run_id')),
    )
    expect(new Set(ids).size).toBe(3)
    const ports = new Set([topology().standalone.port, ...topology().independents.map((s) => s.port)])
    expect(ports.size).toBe(4)
  })
})

describe('private servers', () => {
  let server: RedisServerHandle
  afterAll(() => server?.stop())

  it('counts commands, stops (connection refused) and restarts on the same port', async () => {
    server = await startRedisServer()
    const client = connectTo(server)
    const before = await commandCount(client)
    const setBefore = await commandCount(client, 'set')
    await client.set('a', '1')
    await client.get('a')
    await client.incr('n')
    expect(await commandCount(client)).toBe(before + 3)
    expect(await commandCount(client, 'set')).toBe(setBefore + 1)

    const { port, pid } = server
    await server.stop()
    expect(server.running).toBe(false)
    expect(await probe(port)).toBe('ECONNREFUSED')

    await server.restart()
    expect(server.port).toBe(port)
    expect(server.pid).not.toBe(pid)
    expect(await probe(port)).toBe('connected')
    expect(await connectTo(server).ping()).toBe('PONG')
  })

  it('sums command counts over all cluster masters', async () => {
    const cluster = connectCluster()
    const prefix = uniquePrefix()
    await cluster.ping()
    const before = await commandCount(cluster, 'pfadd')
    await Promise.all(['a', 'b', 'c', 'd'].map((k) => cluster.pfadd(`${prefix}${k}`, 'x')))
    expect(await commandCount(cluster, 'pfadd')).toBe(before + 4)
  })
})

describe('child processes', () => {
  it('exchanges JSON messages with a tsx worker that sees the topology', async () => {
    const child = spawnChild(new URL('../fixtures/echo-worker.ts', import.meta.url), ['--flag'])
    const ready = await child.waitFor('ready')
    expect(ready).toMatchObject({ pong: 'PONG', argv: ['--flag'] })
    child.send({ type: 'hello', n: 1 })
    expect(await child.waitFor('echo')).toEqual({ type: 'echo', payload: { type: 'hello', n: 1 } })
    child.send({ type: 'exit' })
    expect(await child.exited).toEqual({ code: 0, signal: null })
  })

  it('kills a child by PID', async () => {
    const child = spawnChild(new URL('../fixtures/echo-worker.ts', import.meta.url))
    await child.waitFor('ready')
    child.kill('SIGKILL')
    expect(await child.exited).toEqual({ code: null, signal: 'SIGKILL' })
    await expect(child.waitFor('never', 100)).rejects.toThrow(/exited/)
  })
})
