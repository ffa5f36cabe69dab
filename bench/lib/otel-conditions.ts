// The two OpenTelemetry conditions the middleware bench compares against the default one
// (@opentelemetry/api installed, no provider registered). Each is set up before the library loads.
import { register } from 'node:module'

/** As where @opentelemetry/api is not installed: resolving it fails from now on. */
export function withoutOpenTelemetry(): void {
  const hook = `export async function resolve(specifier, context, next) {
    if (specifier === '@opentelemetry/api') throw Object.assign(new Error('absent'), { code: 'ERR_MODULE_NOT_FOUND' })
    return next(specifier, context)
  }`
  register(`data:text/javascript,${encodeURIComponent(hook)}`)
}

/** The SDK's providers registered, as an application that exports its telemetry has them: spans
 * sampled and processed in batches (to an exporter that drops them), metrics aggregated (and never
 * collected here). */
export async function withOpenTelemetryProviders(): Promise<void> {
  const { metrics, trace } = await import('@opentelemetry/api')
  const { TracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace')
  const { MeterProvider } = await import('@opentelemetry/sdk-metrics')
  const dropped = {
    export: (_spans: unknown, done: (result: { code: 0 }) => void) => done({ code: 0 }),
    shutdown: async () => {},
  }
  trace.setGlobalTracerProvider(
    new TracerProvider({ spanProcessors: [new BatchSpanProcessor({ exporter: dropped })] }),
  )
  metrics.setGlobalMeterProvider(new MeterProvider())
}
