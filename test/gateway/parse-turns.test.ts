// The admin listener's parser, fed 128-byte slices in turns (src/gateway/http/parse-turns.ts), on raw
// sockets: what it must parse as Node would, what it must not parse at all, and what it counts.
import { readFileSync } from 'node:fs'
import type net from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import type { Gateway } from '../../src/gateway/index.js'
import { sleep } from '../helpers/contract.js'
import { startInProcess } from '../helpers/in-process-gateway.js'
import { rawConnect, statuses } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((gateway) => gateway.close()))
})

async function adminPort(): Promise<number> {
  const upstream = await startUpstream()
  const { gateway } = await startInProcess(gateways, {
    admin: { host: '127.0.0.1', port: 0 },
    defaults: { upstream: upstream.url, concurrency: { per: 'route', permits: 10 } },
  })
  return (gateway.admin!.address() as net.AddressInfo).port
}

/** `text` in one write (then a half-close, if asked); what came back once closed or after `ms`. */
async function exchange(port: number, text: string, halfClose = false, ms = 1000): Promise<string> {
  const client = await rawConnect(port)
  client.write(text)
  if (halfClose) client.socket.end()
  return Promise.race([client.closed, sleep(ms).then(() => `${client.received()}(still open)`)])
}

const H = 'Host: 127.0.0.1\r\n'

describe('the admin listener’s parser', () => {
  it('parses nothing after a request with Upgrade (answered, Connection: close) or CONNECT', async () => {
    const port = await adminPort()
    // The listener upgrades nothing: Node answers such a request as a plain one, and its parser drops
    // the rest of the input it was given, here the rest of a slice. Behind it, a head whose header
    // value holds, from byte 128 on, another request.
    const upgrade = `GET /healthz HTTP/1.1\r\n${H}Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n`
    const lead = `GET /healthz HTTP/1.1\r\n${H}X-A: `
    const hidden = `GET /limits/default HTTP/1.1\r\n${H}\r\n`
    const received = await exchange(
      port,
      upgrade + lead + 'b'.repeat(128 - upgrade.length - lead.length) + hidden,
    )
    // Before: the hidden /limits/default answered too, and the connection kept open.
    expect(statuses(received)).toEqual([200])
    expect(received).toMatch(/\r\nconnection: close\r\n/i)
    expect(received).not.toContain('(still open)')
    const connect = await exchange(
      port,
      `CONNECT 127.0.0.1:1 HTTP/1.1\r\n${H}\r\nGET /healthz HTTP/1.1\r\n${H}\r\n`,
    )
    expect(statuses(connect)).toEqual([])
  })

  it('answers a request whose client then closes its side (half-close), then closes', async () => {
    const port = await adminPort()
    for (const asked of ['/metrics', '/healthz'])
      // Before: /metrics (made over several turns) got nothing: the connection was ended first.
      expect(statuses(await exchange(port, `GET ${asked} HTTP/1.1\r\n${H}\r\n`, true)), asked).toEqual([200])
    // Two pipelined, then the half-close: the first is answered (a connection serves one request).
    const two = await exchange(
      port,
      `GET /metrics HTTP/1.1\r\n${H}\r\nGET /readyz HTTP/1.1\r\n${H}\r\n`,
      true,
    )
    expect(statuses(two)).toEqual([200])
    expect(two).not.toContain('(still open)')
  })

  it('counts the answers Node would give itself (an unknown Expect: 417) as the one request a connection serves', async () => {
    const port = await adminPort()
    const received = await exchange(
      port,
      `GET /healthz HTTP/1.1\r\n${H}Expect: nope\r\n\r\n`.repeat(40) +
        `GET /healthz HTTP/1.1\r\n${H}\r\n`.repeat(10),
    )
    // Before: 40 answers 417 and 10 answers 200, on a connection kept open.
    expect(statuses(received)).toEqual([417])
    expect(received).not.toContain('(still open)')
  })

  it('runs on every Node major: scripts/test-node-majors.mjs runs this file and admin-listener.test.ts', () => {
    // parse-turns.ts stands on http.Server's internals (one 'data' listener, socket._paused).
    const suites = /const SUITES = \[([\s\S]*?)\]/.exec(
      readFileSync('scripts/test-node-majors.mjs', 'utf8'),
    )?.[1]
    expect(suites).toContain("'test/gateway/parse-turns.test.ts'")
    expect(suites).toContain("'test/gateway/admin-listener.test.ts'")
  })
})
