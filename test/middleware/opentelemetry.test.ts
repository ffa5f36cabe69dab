// Admission in OpenTelemetry (src/admission/telemetry.ts), through the SDK's in-memory exporters, in a
// real Express 5 app on real Redis: a span per decision, child of the request's span, with its bucket,
// wait, result and fencing token; and the metrics of ASP.NET Core's rate limiting conventions.
import type { AddressInfo } from 'node:net'
import { context, metrics, type Span, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import {
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  AggregationTemporality,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import {
  TracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace'
import express from 'express'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { telemetryLoaded } from '../../src/admission/telemetry.js'
import { createRedisStore } from '../../src/index.js'
import { keyDigest } from '../../src/core/events.js'
import { byHeader, semaphore } from '../../src/middleware/express.js'
import { eventually } from '../helpers/contract.js'
import { connectStandalone, uniquePrefix } from '../helpers/redis.js'

const spans = new InMemorySpanExporter()
const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
const reader = new PeriodicExportingMetricReader({
  exporter: metricExporter,
  exportIntervalMillis: 3_600_000,
})

beforeAll(async () => {
  await telemetryLoaded
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  trace.setGlobalTracerProvider(
    new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter: spans })] }),
  )
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }))
})

afterAll(() => {
  trace.disable()
  metrics.disable()
  context.disable()
})

/** Every point of a metric, from a fresh collection. */
async function points(name: string): Promise<DataPoint<unknown>[]> {
  metricExporter.reset()
  await reader.forceFlush()
  return metricExporter
    .getMetrics()
    .flatMap((resource) => resource.scopeMetrics)
    .flatMap((scope) => scope.metrics)
    .filter((metric) => metric.descriptor.name === name)
    .flatMap((metric) => metric.dataPoints as DataPoint<unknown>[])
}

const byResult = async (name: string) =>
  Object.fromEntries(
    (await points(name)).map((point) => [
      point.attributes['tollgate.result'],
      typeof point.value === 'number' ? point.value : (point.value as Histogram).count,
    ]),
  )

it('a span per decision, child of the request span, and the ASP.NET Core rate limiting metrics', async () => {
  const store = createRedisStore(connectStandalone(), { prefix: uniquePrefix().slice(0, -1) })
  const tracer = trace.getTracer('test')
  const app = express()
  const requestSpans = new Map<string, Span>()
  // The application's own request span (what its HTTP instrumentation would start).
  app.use((req, _res, next) => {
    const span = tracer.startSpan(`request ${String(req.query.id)}`)
    requestSpans.set(String(req.query.id), span)
    _res.on('close', () => span.end())
    context.with(trace.setSpan(context.active(), span), next)
  })
  app.use(semaphore({ name: 'export', permits: 1, store, maxWaitMs: 300, maxQueue: 1 }))
  const holders: (() => void)[] = []
  app.get('/', (req, res) => {
    if (req.query.hold === undefined) return void res.send('ok')
    holders.push(() => res.send('ok'))
  })
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const get = (id: string, hold = false) => fetch(`${url}/?id=${id}${hold ? '&hold' : ''}`)
  try {
    const a = get('a', true)
    await eventually(() => holders.length === 1)
    const b = get('b') // waits for a's permit
    await eventually(async () => (await points('tollgate.queued_requests'))[0]?.value === 1)
    expect((await get('c')).status).toBe(503) // the queue (maxQueue 1) is full
    holders.shift()?.()
    expect((await a).status).toBe(200)
    expect((await b).status).toBe(200)
    const d = get('d', true)
    await eventually(() => holders.length === 1)
    expect((await get('e')).status).toBe(503) // waited its 300 ms
    holders.shift()?.()
    expect((await d).status).toBe(200)

    await eventually(() => spans.getFinishedSpans().filter(isAdmission).length === 5)
    const admissions = new Map(
      spans
        .getFinishedSpans()
        .filter(isAdmission)
        .map((span) => [idOf(span), span]),
    )
    const expected = { a: 'admitted', b: 'admitted', c: 'queue_full', d: 'admitted', e: 'timeout' }
    for (const [id, result] of Object.entries(expected)) {
      const span = admissions.get(id) as ReadableSpan
      expect(span.attributes).toMatchObject({
        'tollgate.policy': 'export',
        'tollgate.bucket': '*',
        'tollgate.result': result,
      })
      expect(span.parentSpanContext?.spanId).toBe(requestSpans.get(id)?.spanContext().spanId)
      expect(typeof span.attributes['tollgate.fencing_token']).toBe(
        result === 'admitted' ? 'number' : 'undefined',
      )
    }
    const fences = ['a', 'b', 'd'].map((id) => admissions.get(id)?.attributes['tollgate.fencing_token'])
    expect(fences).toEqual([...(fences as number[])].sort((x, y) => x - y))
    // b waited for a (held until c was refused); e waited its 300 ms: the span lasts the wait.
    const waited = (id: string) => admissions.get(id)?.attributes['tollgate.wait'] as number
    expect(waited('e')).toBeGreaterThanOrEqual(0.29)
    expect(waited('b')).toBeGreaterThan(0)
    const e = admissions.get('e') as ReadableSpan
    expect(e.duration[0] + e.duration[1] / 1e9).toBeCloseTo(waited('e'), 2)

    expect(await byResult('tollgate.requests')).toEqual({ admitted: 3, queue_full: 1, timeout: 1 })
    expect(await byResult('tollgate.request.time_in_queue')).toEqual({
      admitted: 3,
      queue_full: 1,
      timeout: 1,
    })
    await eventually(async () => (await points('tollgate.active_request_leases'))[0]?.value === 0)
    expect((await points('tollgate.queued_requests'))[0]?.value).toBe(0)
    const leases = await points('tollgate.request_lease.duration')
    expect(leases.map((point) => [point.attributes, (point.value as Histogram).count])).toEqual([
      [{ 'tollgate.policy': 'export' }, 3],
    ])
  } finally {
    await new Promise((resolve) => server.close(resolve))
    await store.close()
  }
})

it("a keyed bucket's key is request data (a tenant, an address, an API key): spans carry its digest", async () => {
  spans.reset()
  const app = express()
  app.use(semaphore({ name: 'per-tenant', permits: 2, key: byHeader('x-tenant') }))
  app.get('/', (_req, res) => void res.send('ok'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
    expect((await fetch(url, { headers: { 'x-tenant': 'sk_live_secret' } })).status).toBe(200)
    await eventually(() => spans.getFinishedSpans().some(isAdmission))
    const [span] = spans.getFinishedSpans().filter(isAdmission)
    expect(span?.attributes['tollgate.bucket']).toBe(keyDigest('sk_live_secret'))
    expect(JSON.stringify(span?.attributes)).not.toContain('secret')
  } finally {
    await new Promise((resolve) => server.close(resolve))
  }
})

it('a client that leaves while it waits: a span and a count of `canceled`, and its place in the queue given back', async () => {
  spans.reset()
  const store = createRedisStore(connectStandalone(), { prefix: uniquePrefix().slice(0, -1) })
  const app = express()
  app.use(semaphore({ name: 'leaving', permits: 1, store, maxWaitMs: 5000 }))
  const holders: (() => void)[] = []
  app.get('/', (_req, res) => void holders.push(() => res.send('ok')))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
  try {
    const held = fetch(url)
    await eventually(() => holders.length === 1)
    const leaving = new AbortController()
    const waiter = fetch(url, { signal: leaving.signal }).catch(() => 'left')
    const queued = async () =>
      (await points('tollgate.queued_requests')).find((p) => p.attributes['tollgate.policy'] === 'leaving')
        ?.value
    await eventually(async () => (await queued()) === 1)
    leaving.abort()
    expect(await waiter).toBe('left')
    await eventually(() =>
      spans.getFinishedSpans().some((span) => span.attributes['tollgate.result'] === 'canceled'),
    )
    expect(await queued()).toBe(0)
    const counted = (await points('tollgate.requests')).filter(
      (p) => p.attributes['tollgate.policy'] === 'leaving',
    )
    expect(Object.fromEntries(counted.map((p) => [p.attributes['tollgate.result'], p.value]))).toEqual({
      admitted: 1,
      canceled: 1,
    })
    holders.shift()?.()
    expect((await held).status).toBe(200)
  } finally {
    await new Promise((resolve) => server.close(resolve))
    await store.close()
  }
})

it('an SDK that throws never reaches a request: answered, permits given back, one warning, telemetry off for the policy', async () => {
  const warnings: Error[] = []
  const onWarning = (warning: Error) => warnings.push(warning)
  process.on('warning', onWarning)
  trace.disable()
  const throwing = {
    onStart: () => {
      throw new Error('exporter exploded')
    },
    onEnd: () => {},
    forceFlush: async () => {},
    shutdown: async () => {},
  }
  trace.setGlobalTracerProvider(new TracerProvider({ spanProcessors: [throwing] }))
  const app = express()
  const middleware = semaphore({ name: 'throwing', permits: 1, maxWaitMs: 1000 })
  app.use(middleware)
  app.get('/', (_req, res) => void res.send('ok'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
  try {
    // permits: 1, one after another: each finds the permit the one before gave back.
    for (let i = 0; i < 5; i++) expect((await fetch(url)).status).toBe(200)
    await eventually(() => middleware.counters.inFlight === 0)
    await new Promise((resolve) => setImmediate(resolve))
    const ours = warnings.filter(
      (warning) => (warning as { code?: string }).code === 'TOLLGATE_TELEMETRY_FAILED',
    )
    expect(ours.map((warning) => warning.message)).toEqual([
      'tollgate: OpenTelemetry failed for policy "throwing", which reports no more spans or metrics: exporter exploded',
    ])
  } finally {
    process.off('warning', onWarning)
    await new Promise((resolve) => server.close(resolve))
  }
})

function isAdmission(span: ReadableSpan): boolean {
  return span.name === 'tollgate admission'
}

/** The request a span of admission belongs to (its parent's name: "request <id>"). */
function idOf(span: ReadableSpan): string {
  const parent = spans
    .getFinishedSpans()
    .find((other) => other.spanContext().spanId === span.parentSpanContext?.spanId)
  return parent?.name.replace(/^request /, '') ?? '?'
}
