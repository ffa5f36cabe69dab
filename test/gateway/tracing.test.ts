// The gateway's own spans, exported by the bin when the standard OTEL_* variables ask for them: a
// real gateway process, on real Redis, exports to a real OTLP/HTTP receiver written here, which
// decodes what the exporter sends (JSON: ExportTraceServiceRequest). The upstream sees the gateway's
// span as its parent. Without the variables, the client's trace context reaches the upstream as sent
// (operations.test.ts).
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { eventually } from '../helpers/contract.js'
import { baseFlags, metric, redisUrl, runGateway, spawnGateway } from '../helpers/gateway.js'
import { topology, uniquePrefix } from '../helpers/redis.js'
import { freePort } from '../helpers/redis-server.js'
import { startUpstream } from '../helpers/upstream.js'

interface OtlpValue {
  stringValue?: string
  intValue?: string | number
  doubleValue?: number
  boolValue?: boolean
}
interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes?: { key: string; value: OtlpValue }[]
}
interface Exported {
  resource: Record<string, unknown>
  span: OtlpSpan
  attributes: Record<string, unknown>
}

const receivers: http.Server[] = []
afterEach(async () => {
  for (const server of receivers.splice(0)) {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
})

function valueOf(value: OtlpValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue
  if (value.intValue !== undefined) return Number(value.intValue)
  if (value.doubleValue !== undefined) return value.doubleValue
  return value.boolValue
}

function attributesOf(list: { key: string; value: OtlpValue }[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map(({ key, value }) => [key, valueOf(value)]))
}

interface Receiver {
  url: string
  spans: Exported[]
  contentTypes: string[]
  /** Exports answered 500 (a collector that refuses them), counted. */
  refused: number
  /** Answer 500 to every export while true. */
  refusing: boolean
}

/** An OTLP/HTTP receiver: every span of every POST /v1/traces, decoded. */
async function startReceiver(): Promise<Receiver> {
  const spans: Exported[] = []
  const contentTypes: string[] = []
  const receiver: Receiver = { url: '', spans, contentTypes, refused: 0, refusing: false }
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      contentTypes.push(String(req.headers['content-type']))
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end()
        return
      }
      if (receiver.refusing) {
        receiver.refused++
        res.writeHead(500).end()
        return
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        resourceSpans: {
          resource: { attributes: { key: string; value: OtlpValue }[] }
          scopeSpans: { spans: OtlpSpan[] }[]
        }[]
      }
      for (const { resource, scopeSpans } of body.resourceSpans)
        for (const { spans: list } of scopeSpans)
          for (const span of list)
            spans.push({
              resource: attributesOf(resource.attributes),
              span,
              attributes: attributesOf(span.attributes),
            })
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  receivers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  receiver.url = `http://127.0.0.1:${port}`
  return receiver
}

const CLIENT_TRACE = '0af7651916cd43dd8448eb211c80319c'
const CLIENT_SPAN = 'b7ad6b7169203331'

/** A WebSocket handshake on a raw socket, in the client's trace; resolves once an answer's head
 * arrived (`wait: false`: once sent). */
async function upgrade(
  port: string,
  path: string,
  wait = true,
): Promise<{ socket: net.Socket; status: number }> {
  const socket = net.connect(Number(port), '127.0.0.1')
  socket.on('error', () => {})
  let head = ''
  socket.on('data', (chunk: Buffer) => (head += chunk.toString('latin1')))
  socket.write(
    `GET ${path} HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
      `traceparent: 00-${CLIENT_TRACE}-${CLIENT_SPAN}-01\r\n\r\n`,
  )
  if (wait) await eventually(() => head.includes('\r\n\r\n'))
  return { socket, status: Number(head.split(' ')[1]) }
}

describe('the gateway exports its spans with OTEL_*', () => {
  it('a server span per request, a child of the client’s; the admission span its child; the upstream its child', async () => {
    const receiver = await startReceiver()
    const upstream = await startUpstream()
    const gateway = await spawnGateway(
      [
        ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
        '--redis',
        redisUrl(topology().standalone),
        '--permits',
        '2',
      ],
      {
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
          OTEL_SERVICE_NAME: 'edge-gateway',
          OTEL_BSP_SCHEDULE_DELAY: '50',
        },
      },
    )
    const answered = await fetch(`${gateway.url}/headers`, {
      headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'rojo=00f067aa0ba902b7' },
    })
    expect(answered.status).toBe(200)
    const seen = (await answered.json()) as Record<string, string>
    await eventually(() => receiver.spans.length >= 2, 10_000)

    const server = receiver.spans.find(({ span }) => span.kind === 2) // SPAN_KIND_SERVER
    const admission = receiver.spans.find(({ span }) => span.name === 'tollgate admission')
    expect(server, JSON.stringify(receiver.spans)).toBeDefined()
    expect(admission).toBeDefined()
    // One trace, the client's: the gateway's span is a child of the client's span, the admission's a
    // child of the gateway's.
    expect(server!.span.traceId).toBe(CLIENT_TRACE)
    expect(server!.span.parentSpanId).toBe(CLIENT_SPAN)
    expect(admission!.span.traceId).toBe(CLIENT_TRACE)
    expect(admission!.span.parentSpanId).toBe(server!.span.spanId)
    expect(server!.attributes).toMatchObject({
      'http.request.method': 'GET',
      'http.response.status_code': 200,
      'tollgate.route': 'default',
    })
    expect(admission!.attributes).toMatchObject({ 'tollgate.result': 'admitted' })
    expect(admission!.attributes['tollgate.fencing_token']).toBeGreaterThan(0)
    expect(server!.resource['service.name']).toBe('edge-gateway')
    // The upstream's parent is the gateway's span, in the client's trace; the vendors' state is kept.
    expect(seen.traceparent).toBe(`00-${CLIENT_TRACE}-${server!.span.spanId}-01`)
    expect(seen.tracestate).toBe('rojo=00f067aa0ba902b7')
    expect(receiver.contentTypes.every((type) => type.startsWith('application/json'))).toBe(true)
  })

  it('a rejected request: its span says why, and the admission span says busy', async () => {
    const receiver = await startReceiver()
    const upstream = await startUpstream()
    const gateway = await spawnGateway(
      [...baseFlags(upstream.url, uniquePrefix().slice(0, -1)), '--permits', '1', '--max-wait-ms', '0'],
      {
        env: {
          OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
          OTEL_BSP_SCHEDULE_DELAY: '50',
        },
      },
    )
    const held = fetch(`${gateway.url}/hold`)
    await eventually(() => upstream.probe.holders.length === 1)
    const rejected = await fetch(`${gateway.url}/work`)
    expect(rejected.status).toBe(503)
    upstream.probe.holders.shift()!()
    expect((await held).status).toBe(200)
    await eventually(() => receiver.spans.filter(({ span }) => span.kind === 2).length >= 2, 10_000)
    const refused = receiver.spans.find(({ attributes }) => attributes['http.response.status_code'] === 503)
    expect(refused?.attributes['tollgate.outcome']).toBe('busy')
    const busy = receiver.spans.find(
      ({ span, attributes }) =>
        span.name === 'tollgate admission' && attributes['tollgate.result'] === 'busy',
    )
    expect(busy?.span.parentSpanId).toBe(refused?.span.spanId)
    expect(refused?.resource['service.name']).toBe('tollgate')
  })

  it("a client's tracestate without a valid traceparent of its own is not forwarded (W3C)", async () => {
    const receiver = await startReceiver()
    const upstream = await startUpstream()
    const gateway = await spawnGateway(baseFlags(upstream.url, uniquePrefix().slice(0, -1)), {
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '50' },
    })
    const seen = (await (
      await fetch(`${gateway.url}/headers`, {
        headers: { traceparent: 'garbage', tracestate: `vendor=${'x'.repeat(2000)}` },
      })
    ).json()) as Record<string, string | undefined>
    // A new trace, started by the gateway; the client's state went with its broken traceparent.
    expect(seen.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/)
    expect(seen.traceparent).not.toContain(CLIENT_TRACE)
    expect(seen.tracestate).toBeUndefined()
  })

  it('OTEL_TRACES_SAMPLER=always_off: nothing exported, and the upstream is told it is not sampled', async () => {
    const receiver = await startReceiver()
    const upstream = await startUpstream()
    const gateway = await spawnGateway(baseFlags(upstream.url, uniquePrefix().slice(0, -1)), {
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_TRACES_SAMPLER: 'always_off',
        OTEL_BSP_SCHEDULE_DELAY: '50',
      },
    })
    const seen = (await (
      await fetch(`${gateway.url}/headers`, {
        headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` },
      })
    ).json()) as Record<string, string>
    // Not sampled: the upstream is told so, in the client's trace.
    expect(seen.traceparent).toMatch(new RegExp(`^00-${CLIENT_TRACE}-[0-9a-f]{16}-00$`))
    gateway.kill('SIGTERM') // the shutdown sends whatever is batched
    expect(await gateway.exited).toEqual({ code: 0, signal: null })
    expect(receiver.spans).toEqual([])
  })

  it('a collector that refuses exports: one warning (not one per export), requests unaffected; the rest told at shutdown', async () => {
    const receiver = await startReceiver()
    receiver.refusing = true
    const upstream = await startUpstream()
    const gateway = await spawnGateway(baseFlags(upstream.url, uniquePrefix().slice(0, -1)), {
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '20' },
    })
    const report = () => gateway.logs().filter((line) => String(line.msg).startsWith('span export'))
    // Several exports refused, each after a request whose span it carried.
    for (let i = 0; i < 5; i++) {
      expect((await fetch(`${gateway.url}/work`)).status).toBe(200)
      const refused = receiver.refused
      await eventually(() => receiver.refused > refused)
    }
    await eventually(() => report().length > 0)
    receiver.refusing = false
    expect((await fetch(`${gateway.url}/work`)).status).toBe(200)
    await eventually(() => receiver.spans.length > 0)
    // Within the minute, the first failure's warning is all the log says.
    const [first, ...more] = report()
    expect(more).toEqual([])
    expect(first).toMatchObject({ level: 40, failedExports: 1, stillFailing: true })
    expect(String(first?.error)).not.toBe('unknown')
    // A shutdown tells what the minute held back: the collector is back, with the failures since.
    gateway.kill('SIGTERM')
    expect(await gateway.exited).toEqual({ code: 0, signal: null })
    const [, recovered, ...after] = report()
    expect(after).toEqual([])
    expect(recovered).toMatchObject({ level: 30, msg: 'span export recovered' })
    // Every refused export is in one line or the other, with its spans (a request's and its
    // admission's).
    expect(Number(first?.failedExports) + Number(recovered?.failedExports)).toBe(receiver.refused)
    expect(Number(first?.droppedSpans) + Number(recovered?.droppedSpans)).toBeGreaterThanOrEqual(10)
  })

  it('a WebSocket upgrade: a span per handshake (101 when the tunnel opens, 503 busy when refused), the upstream its child', async () => {
    const receiver = await startReceiver()
    const upstream = await startUpstream()
    const gateway = await spawnGateway(
      [...baseFlags(upstream.url, uniquePrefix().slice(0, -1)), '--permits', '1', '--max-wait-ms', '0'],
      { env: { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '50' } },
    )
    const { port } = new URL(gateway.url)
    const open = await upgrade(port, '/ws/one')
    expect(open.status).toBe(101)
    const refused = await upgrade(port, '/ws/two') // the only permit is the open tunnel's
    expect(refused.status).toBe(503)
    // Both handshakes' spans are exported while the tunnel is still open.
    await eventually(() => receiver.spans.filter(({ span }) => span.kind === 2).length === 2, 10_000)
    const server = (status: number) =>
      receiver.spans.find(
        ({ span, attributes }) => span.kind === 2 && attributes['http.response.status_code'] === status,
      )
    const tunnel = server(101)
    expect(tunnel?.span).toMatchObject({
      traceId: CLIENT_TRACE,
      parentSpanId: CLIENT_SPAN,
      name: 'GET default',
    })
    expect(tunnel?.attributes['tollgate.outcome']).toBeUndefined()
    expect(server(503)?.attributes['tollgate.outcome']).toBe('busy')
    const admissions = receiver.spans.filter(({ span }) => span.name === 'tollgate admission')
    expect(admissions.map(({ span }) => span.parentSpanId).sort()).toEqual(
      [tunnel?.span.spanId, server(503)?.span.spanId].sort(),
    )
    // The upstream's handshake carries the gateway's span as its parent.
    expect(upstream.probe.lastHeaders.traceparent).toBe(`00-${CLIENT_TRACE}-${tunnel?.span.spanId}-01`)
    open.socket.destroy()
    refused.socket.destroy()
  })

  it('a WebSocket handshake the client leaves while it waits ends its span 499; one the upstream cannot take, 502', async () => {
    const receiver = await startReceiver()
    const upstream = await startUpstream()
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '50' }
    const gateway = await spawnGateway(
      [...baseFlags(upstream.url, uniquePrefix().slice(0, -1)), '--permits', '1', '--max-wait-ms', '10000'],
      { env },
    )
    const { port } = new URL(gateway.url)
    const open = await upgrade(port, '/ws/one')
    expect(open.status).toBe(101)
    const queued = await upgrade(port, '/ws/two', false)
    const queuedNow = async () =>
      metric(await (await fetch(`${gateway.adminUrl}/metrics`)).text(), 'tollgate_requests_queued', {
        route: 'default',
      })
    await eventually(async () => (await queuedNow()) === 1)
    queued.socket.destroy()
    const servers = () => receiver.spans.filter(({ span }) => span.kind === 2)
    await eventually(() => servers().length === 2, 10_000)
    const left = servers().find(({ attributes }) => attributes['http.response.status_code'] !== 101)
    expect(
      left?.attributes['http.response.status_code'],
      JSON.stringify(receiver.spans.map((x) => [x.span.name, x.attributes])),
    ).toBe(499)
    open.socket.destroy()

    const down = await spawnGateway(
      baseFlags(`http://127.0.0.1:${await freePort()}`, uniquePrefix().slice(0, -1)),
      {
        env,
      },
    )
    const refused = await upgrade(new URL(down.url).port, '/ws/three')
    expect(refused.status).toBe(502)
    await eventually(() => servers().length === 3, 10_000)
    expect(servers()[2]?.attributes['http.response.status_code']).toBe(502)
    refused.socket.destroy()
  })

  it('a variable the gateway cannot honour: exit 2, naming it and the fix', async () => {
    const upstream = await startUpstream()
    const run = runGateway(baseFlags(upstream.url, 'otel-bad'), {
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
    })
    expect(await run.exited).toEqual({ code: 2, signal: null })
    expect(run.stderr()).toContain(
      'tollgate: OTEL_EXPORTER_OTLP_PROTOCOL: the gateway sends traces as OTLP/HTTP JSON, not "grpc": set http/json, or leave it unset',
    )
  })
})
