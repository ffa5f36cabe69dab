// The gateway's own spans: one server span per proxied request, a child of the client's W3C trace
// context, around the request's admission (whose span, admission/telemetry.ts, becomes its child)
// and its forwarding (the upstream gets this span's traceparent). Made only while a tracer provider
// is registered: by the bin from the standard OTEL_* variables (startTracing()), or by an application
// that embeds the gateway and registered its own. Without one, a request costs one check, and the
// client's traceparent and tracestate reach the upstream untouched. docs/gateway/operate.md,
// "Traces".
import type * as OtelApi from '@opentelemetry/api'
import { registeredTracer, telemetryLoaded } from '../../admission/telemetry.js'
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
 * of the client's. */
export function withTraceContext(trace: RequestTrace, headers: string[]): string[] {
  const carrier: Record<string, string> = {}
  try {
    trace.otel.propagation.inject(trace.context, carrier)
  } catch {
    return headers
  }
  if (Object.keys(carrier).length === 0) return headers
  const out: string[] = []
  for (let i = 0; i < headers.length; i += 2) {
    const lower = (headers[i] as string).toLowerCase()
    if (lower in carrier) continue
    out.push(headers[i] as string, headers[i + 1] as string)
  }
  for (const [name, value] of Object.entries(carrier)) out.push(name, value)
  return out
}

/** End a request's span with what came of it: the status sent (499 when the client left first) and,
 * for one the gateway answered itself, why. */
export function endRequestSpan(trace: RequestTrace, res: ClientResponse, outcome: string | undefined): void {
  try {
    const status = res.headersSent ? res.statusCode : 499
    trace.span.setAttribute('http.response.status_code', status)
    if (outcome !== undefined) trace.span.setAttribute('tollgate.outcome', outcome)
    if (status >= 500) trace.span.setStatus({ code: trace.otel.SpanStatusCode.ERROR })
    trace.span.end()
  } catch {
    // a failing SDK never fails a request
  }
}

/** What the bin registered: ended (its spans flushed) at shutdown. */
export interface Tracing {
  shutdown(): Promise<void>
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
 * OpenTelemetry SDK is: OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turns it
 * on, OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true off; OTEL_SERVICE_NAME (default
 * "tollgate") and OTEL_RESOURCE_ATTRIBUTES name the process; the exporter reads its own OTEL_EXPORTER_*
 * and the batch processor its OTEL_BSP_* variables. Resolves undefined when tracing is off. Rejects
 * with a GatewayConfigError when a variable asks for what the gateway cannot do, or a package is missing.
 */
export async function startTracing(env: NodeJS.ProcessEnv): Promise<Tracing | undefined> {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter(Boolean)
  if (exporters.includes('none')) return undefined
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT
  if (exporters.length === 0 && !endpoint) return undefined
  const other = exporters.find((name) => name !== 'otlp')
  if (other !== undefined)
    throw variable(
      'OTEL_TRACES_EXPORTER',
      `the gateway exports traces with OTLP only, not "${other}": set otlp, or none`,
    )
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL
  if (protocol !== undefined && protocol.trim() !== 'http/json')
    throw variable(
      'OTEL_EXPORTER_OTLP_PROTOCOL',
      `the gateway sends traces as OTLP/HTTP JSON, not "${protocol}": set http/json, or leave it unset`,
    )
  const loaded = await loadTracingPackages()
  const [otel, sdk, exporter, hooks, core, resources] = loaded
  const detected = resources.detectResources({ detectors: [resources.envDetector] })
  const named = detected.attributes['service.name'] === undefined
  const resource = resources
    .defaultResource()
    .merge(named ? resources.resourceFromAttributes({ 'service.name': 'tollgate' }) : null)
    .merge(detected)
  const provider = new sdk.TracerProvider({
    resource,
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter: new exporter.OTLPTraceExporter() })],
  })
  otel.context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager().enable())
  otel.propagation.setGlobalPropagator(new core.W3CTraceContextPropagator())
  otel.trace.setGlobalTracerProvider(provider)
  await telemetryLoaded
  return { shutdown: () => provider.shutdown() }
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
