// The gateway's own spans: one server span per proxied request, a child of the client's W3C trace
// context, around the request's admission (whose span, admission/telemetry.ts, becomes its child)
// and its forwarding (the upstream gets this span's traceparent). Made only while a tracer provider
// is registered: by the bin from the standard OTEL_* variables (startTracing()), or by an application
// that embeds the gateway and registered its own. Without one, a request costs one check, and the
// client's traceparent and tracestate reach the upstream untouched. docs/gateway/operate.md,
// "Traces".
import type * as OtelApi from '@opentelemetry/api'
import { registeredTracer, telemetryLoaded } from '../../admission/telemetry.js'
import { monoNow } from '../../core/clock.js'
import { GatewayConfigError } from '../config/types.js'
import type { ClientRequest, ClientResponse } from '../http/client.js'

/** A request's span, and the context that carries it (active while it is admitted). */
export interface RequestTrace {
  readonly otel: typeof OtelApi
  readonly span: OtelApi.Span
  readonly context: OtelApi.Context
}

/** Start a request's span when a tracer provider is registered; undefined otherwise. */
export function startRequestSpan(req: ClientRequest, route: string | undefined): RequestTrace | undefined {
  const found = registeredTracer()
  if (!found) return undefined
  const { otel, tracer } = found
  try {
    const parent = otel.propagation.extract(otel.ROOT_CONTEXT, req.headers)
    const method = req.method ?? 'GET'
    const span = tracer.startSpan(
      route === undefined ? method : `${method} ${route}`,
      {
        kind: otel.SpanKind.SERVER,
        attributes: {
          'http.request.method': method,
          ...(route === undefined ? {} : { 'tollgate.route': route }),
        },
      },
      parent,
    )
    return { otel, span, context: otel.trace.setSpan(parent, span) }
  } catch {
    return undefined // a failing SDK never fails a request
  }
}

/** Run `fn` with the request's span active (so the admission's span is its child). */
export function inSpan<T>(trace: RequestTrace | undefined, fn: () => T): T {
  return trace ? trace.otel.context.with(trace.context, fn) : fn()
}

/** The headers sent upstream (a flat name, value list) with the request span's trace context in place
 * of the client's: every header the propagator owns (traceparent, tracestate) is the span's, so a
 * client's tracestate never goes on without a traceparent it belongs to (W3C Trace Context). */
export function withTraceContext(trace: RequestTrace, headers: string[]): string[] {
  const carrier: Record<string, string> = {}
  let owned: Set<string>
  try {
    trace.otel.propagation.inject(trace.context, carrier)
    owned = new Set(trace.otel.propagation.fields().map((field) => field.toLowerCase()))
  } catch {
    return headers
  }
  if (owned.size === 0) return headers
  const out: string[] = []
  for (let i = 0; i < headers.length; i += 2) {
    if (owned.has((headers[i] as string).toLowerCase())) continue
    out.push(headers[i] as string, headers[i + 1] as string)
  }
  for (const name of Object.keys(carrier)) if (carrier[name]) out.push(name, carrier[name])
  return out
}

/** End a request's span with what came of it: the status sent (499 when the client left first) and,
 * for one the gateway answered itself, why. */
export function endRequestSpan(trace: RequestTrace, res: ClientResponse, outcome: string | undefined): void {
  endSpanWith(trace, res.headersSent ? res.statusCode : 499, outcome)
}

/** End a request's span with the status the client was sent (499: none, the client left first;
 * undefined: none, the gateway closed the connection, an error). */
export function endSpanWith(
  trace: RequestTrace,
  status: number | undefined,
  outcome: string | undefined,
): void {
  try {
    if (status !== undefined) trace.span.setAttribute('http.response.status_code', status)
    if (outcome !== undefined) trace.span.setAttribute('tollgate.outcome', outcome)
    if (status === undefined || status >= 500) trace.span.setStatus({ code: trace.otel.SpanStatusCode.ERROR })
    trace.span.end()
  } catch {
    // a failing SDK never fails a request
  }
}

/** What the bin registered: ended (its spans flushed) at shutdown. */
export interface Tracing {
  shutdown(): Promise<void>
  /** Where failed exports are told, once the gateway's logger exists (before that: counted only). */
  reportTo(log: ExportLog): void
  /** Tell the failed exports not told yet (after shutdown, however it ended). */
  flushReport(): void
}

/** The part of the gateway's logger the export report writes to. */
export interface ExportLog {
  warn(fields: object, message: string): void
  info(fields: object, message: string): void
}

/** Least time between two lines of the export report. */
export const EXPORT_REPORT_EVERY_MS = 60_000

/**
 * Tells the log what became of the spans the exporter could not send (a collector down, refusing
 * them, or flapping), at most one line a minute, as nginx logs an unreachable upstream per attempt
 * window, not per request:
 *   - "span export failed" (warn): the exports that failed since the line before, the spans they
 *     carried, the last error, and whether exports still fail;
 *   - "span export recovered" (info): an export went through after a "failed" line, with the
 *     failures counted since that line.
 * What the minute holds back is told when it ends (an unref'd timer) or at shutdown (flush()), so no
 * failure goes uncounted. Before the logger exists (reportTo()), failures are only counted.
 */
export class ExportReport {
  private log: ExportLog | undefined
  /** The last export failed. */
  private failing = false
  /** The last line said "failed" (a "recovered" line is owed once an export goes through). */
  private toldFailing = false
  private lastLine = -Infinity
  private failedExports = 0
  private droppedSpans = 0
  private lastError = 'unknown'
  private timer: { cancel(): void } | undefined

  constructor(
    private readonly now: () => number = monoNow,
    /** Runs `fn` after `ms` without keeping the process alive. */
    private readonly later: (fn: () => void, ms: number) => { cancel(): void } = (fn, ms) => {
      const timer = setTimeout(fn, ms)
      timer.unref()
      return { cancel: () => clearTimeout(timer) }
    },
  ) {}

  reportTo(log: ExportLog): void {
    this.log = log
    this.tell(false)
  }

  failed(spans: number, error: Error | undefined): void {
    this.failing = true
    this.failedExports++
    this.droppedSpans += spans
    this.lastError = error?.message ?? 'unknown'
    this.tell(false)
  }

  succeeded(): void {
    this.failing = false
    this.tell(false)
  }

  /** Tell what is owed now, whatever the minute (the process is about to exit). */
  flush(): void {
    this.tell(true)
  }

  private tell(now: boolean): void {
    if (!this.log) return
    const recovered = this.toldFailing && !this.failing
    if (!recovered && this.failedExports === 0) return
    const at = this.now()
    const wait = this.lastLine + EXPORT_REPORT_EVERY_MS - at
    if (!now && wait > 0) {
      this.timer ??= this.later(() => {
        this.timer = undefined
        this.tell(false)
      }, wait)
      return
    }
    this.timer?.cancel()
    this.timer = undefined
    const counts = { failedExports: this.failedExports, droppedSpans: this.droppedSpans }
    // The state moves before the line is written: a log that throws loses its line, not the rule.
    this.toldFailing = !recovered && this.failing
    this.lastLine = at
    this.failedExports = 0
    this.droppedSpans = 0
    if (recovered) this.log.info(counts, 'span export recovered')
    else
      this.log.warn(
        { error: this.lastError, ...counts, stillFailing: this.failing },
        'span export failed: spans dropped; requests are not affected',
      )
  }

  /** Wrap an exporter so that each export's result reaches this report (after its caller). */
  around(exporter: SpanExporter): SpanExporter {
    return {
      export: (spans, done) => {
        exporter.export(spans, (result) => {
          done(result)
          try {
            if (result.code === 0) this.succeeded()
            else this.failed(spans.length, result.error)
          } catch {
            // a failing log never fails an export
          }
        })
      },
      shutdown: () => exporter.shutdown(),
      forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
    }
  }
}

/** The SDK's SpanExporter, as far as the report uses it (declared here: the SDK is optional). */
export interface SpanExporter {
  export(spans: readonly unknown[], done: (result: { code: number; error?: Error }) => void): void
  shutdown(): Promise<void>
  forceFlush?(): Promise<void>
}

/** The packages the bin's traces need: not dependencies of tollgate (most installs never trace). */
export const TRACING_PACKAGES = [
  '@opentelemetry/api',
  '@opentelemetry/sdk-trace',
  '@opentelemetry/exporter-trace-otlp-http',
  '@opentelemetry/context-async-hooks',
  '@opentelemetry/core',
  '@opentelemetry/resources',
] as const

/**
 * Register a tracer provider that exports to an OTLP/HTTP (JSON) endpoint, configured as every
 * OpenTelemetry SDK is, from `env` (an empty variable counts as unset):
 *   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is) or OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces) turns
 *     it on; OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true off;
 *   - OTEL_EXPORTER_OTLP_[TRACES_]HEADERS and _TIMEOUT; OTEL_SERVICE_NAME (default "tollgate") and
 *     OTEL_RESOURCE_ATTRIBUTES; OTEL_TRACES_SAMPLER and _ARG; OTEL_BSP_SCHEDULE_DELAY,
 *     OTEL_BSP_EXPORT_TIMEOUT, OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE.
 * Resolves undefined when tracing is off. Rejects with a GatewayConfigError naming the variable when
 * one asks for what the gateway cannot do, or a package is missing.
 */
export async function startTracing(env: NodeJS.ProcessEnv): Promise<Tracing | undefined> {
  const read = (name: string) => {
    const value = env[name]?.trim()
    return value ? { name, value } : undefined
  }
  if (read('OTEL_SDK_DISABLED')?.value.toLowerCase() === 'true') return undefined
  const exporters = (read('OTEL_TRACES_EXPORTER')?.value ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter(Boolean)
  if (exporters.includes('none')) return undefined
  const own = read('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT')
  const base = read('OTEL_EXPORTER_OTLP_ENDPOINT')
  if (exporters.length === 0 && !own && !base) return undefined
  const other = exporters.find((name) => name !== 'otlp')
  if (other !== undefined)
    throw variable(
      'OTEL_TRACES_EXPORTER',
      `the gateway exports traces with OTLP only, not "${other}": set otlp, or none`,
    )
  const protocol = read('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? read('OTEL_EXPORTER_OTLP_PROTOCOL')
  if (protocol && protocol.value !== 'http/json')
    throw variable(
      protocol.name,
      `the gateway sends traces as OTLP/HTTP JSON, not "${protocol.value}": set http/json, or leave it unset`,
    )
  const url = own?.value ?? (base ? `${base.value.replace(/\/+$/, '')}/v1/traces` : undefined)
  const headers = read('OTEL_EXPORTER_OTLP_TRACES_HEADERS') ?? read('OTEL_EXPORTER_OTLP_HEADERS')
  const timeout = read('OTEL_EXPORTER_OTLP_TRACES_TIMEOUT') ?? read('OTEL_EXPORTER_OTLP_TIMEOUT')
  const batch = {
    scheduledDelayMillis: whole(read('OTEL_BSP_SCHEDULE_DELAY')),
    exportTimeoutMillis: whole(read('OTEL_BSP_EXPORT_TIMEOUT')),
    maxQueueSize: whole(read('OTEL_BSP_MAX_QUEUE_SIZE')),
    maxExportBatchSize: whole(read('OTEL_BSP_MAX_EXPORT_BATCH_SIZE')),
  }
  const attributes = {
    ...pairs(read('OTEL_RESOURCE_ATTRIBUTES')),
    'service.name': read('OTEL_SERVICE_NAME')?.value,
  }
  attributes['service.name'] ??= 'tollgate'
  const [otel, sdk, exporter, hooks, core, resources] = await loadTracingPackages()
  const sampler = samplerOf(sdk, read('OTEL_TRACES_SAMPLER'), read('OTEL_TRACES_SAMPLER_ARG'))
  const report = new ExportReport()
  const provider = new sdk.TracerProvider({
    resource: resources.defaultResource().merge(resources.resourceFromAttributes(attributes)),
    sampler,
    spanProcessors: [
      new sdk.BatchSpanProcessor({
        exporter: report.around(
          new exporter.OTLPTraceExporter({
            url,
            headers: pairs(headers),
            timeoutMillis: whole(timeout),
          }),
        ),
        ...batch,
      }),
    ],
  })
  otel.context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager().enable())
  otel.propagation.setGlobalPropagator(new core.W3CTraceContextPropagator())
  otel.trace.setGlobalTracerProvider(provider)
  await telemetryLoaded
  return {
    shutdown: () => provider.shutdown(),
    reportTo: (log) => report.reportTo(log),
    flushReport: () => report.flush(),
  }
}

/** A positive whole number of a variable (ms or a count); undefined when unset. */
function whole(given: { name: string; value: string } | undefined): number | undefined {
  if (!given) return undefined
  const value = Number(given.value)
  if (!Number.isSafeInteger(value) || value <= 0)
    throw variable(given.name, `expected a positive whole number, got "${given.value}"`)
  return value
}

/** "k=v,k2=v2" (values percent-encoded, as W3C Baggage), as OTEL_*_HEADERS and
 * OTEL_RESOURCE_ATTRIBUTES are written. */
function pairs(given: { name: string; value: string } | undefined): Record<string, string> {
  const out: Record<string, string> = {}
  if (!given) return out
  for (const part of given.value.split(',')) {
    if (!part.trim()) continue
    const at = part.indexOf('=')
    const key = at > 0 ? part.slice(0, at).trim() : ''
    let value: string
    try {
      value = decodeURIComponent(part.slice(at + 1).trim())
    } catch {
      value = ''
    }
    if (!key || at < 0 || !value) throw variable(given.name, `expected key=value pairs separated by commas`)
    out[key] = value
  }
  return out
}

const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
]

/** The sampler OTEL_TRACES_SAMPLER names (default parentbased_always_on), with its ratio _ARG. */
function samplerOf(
  sdk: typeof import('@opentelemetry/sdk-trace'),
  given: { name: string; value: string } | undefined,
  arg: { name: string; value: string } | undefined,
): import('@opentelemetry/sdk-trace').Sampler {
  const name = given?.value.toLowerCase() ?? 'parentbased_always_on'
  if (!SAMPLERS.includes(name))
    throw variable('OTEL_TRACES_SAMPLER', `expected one of ${SAMPLERS.join(', ')}, got "${given?.value}"`)
  let ratio = 1
  if (arg && name.endsWith('traceidratio')) {
    ratio = Number(arg.value)
    if (!(ratio >= 0 && ratio <= 1))
      throw variable(arg.name, `expected a ratio from 0 to 1, got "${arg.value}"`)
  }
  const root = name.endsWith('always_off')
    ? new sdk.AlwaysOffSampler()
    : name.endsWith('traceidratio')
      ? new sdk.TraceIdRatioBasedSampler(ratio)
      : new sdk.AlwaysOnSampler()
  return name.startsWith('parentbased_') ? new sdk.ParentBasedSampler({ root }) : root
}

function variable(name: string, message: string): GatewayConfigError {
  return new GatewayConfigError([{ path: name, message }])
}

type TracingModules = [
  typeof OtelApi,
  typeof import('@opentelemetry/sdk-trace'),
  typeof import('@opentelemetry/exporter-trace-otlp-http'),
  typeof import('@opentelemetry/context-async-hooks'),
  typeof import('@opentelemetry/core'),
  typeof import('@opentelemetry/resources'),
]

async function loadTracingPackages(): Promise<TracingModules> {
  const missing: string[] = []
  const loaded = await Promise.all(
    TRACING_PACKAGES.map((name) =>
      // Computed: bundlers leave these optional packages to run time.
      import(name).catch((error: unknown) => {
        if ((error as NodeJS.ErrnoException | undefined)?.code !== 'ERR_MODULE_NOT_FOUND') throw error
        missing.push(name)
        return undefined
      }),
    ),
  )
  if (missing.length > 0)
    throw variable(
      'OTEL_EXPORTER_OTLP_ENDPOINT',
      `traces need ${missing.join(', ')}, not installed: npm install ${TRACING_PACKAGES.join(' ')}`,
    )
  return loaded as TracingModules
}
