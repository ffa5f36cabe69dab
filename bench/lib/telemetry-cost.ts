// What admission's OpenTelemetry hook (src/admission/telemetry.ts) costs per decision, measured
// directly: the end-to-end middleware rows cannot resolve a microsecond (bare Express's own CPU per
// request moves by more than that between rounds).
//   node --import tsx bench/lib/telemetry-cost.ts <absent|no-provider|providers>
// prints one JSON line: { ns } per decided() + released() of an admitted request, median of 7 runs.
import { register } from 'node:module'

const [variant] = process.argv.slice(2)
if (variant === 'absent') {
  const hook = `export async function resolve(specifier, context, next) {
    if (specifier === '@opentelemetry/api') throw Object.assign(new Error('absent'), { code: 'ERR_MODULE_NOT_FOUND' })
    return next(specifier, context)
  }`
  register(`data:text/javascript,${encodeURIComponent(hook)}`)
} else if (variant === 'providers') {
  const { metrics, trace } = await import('@opentelemetry/api')
  const { BasicTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base')
  const { MeterProvider } = await import('@opentelemetry/sdk-metrics')
  const dropped = {
    export: (_spans: unknown, done: (result: { code: 0 }) => void) => done({ code: 0 }),
    shutdown: async () => {},
  }
  trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropped)] }),
  )
  metrics.setGlobalMeterProvider(new MeterProvider())
} else if (variant !== 'no-provider') {
  process.stderr.write('usage: telemetry-cost.ts <absent|no-provider|providers>\n')
  process.exit(2)
}

// The library as it ships (dist/, built by prebench). A path in a variable: type-checking needs no build.
const dist = new URL('../../dist/admission/telemetry.js', import.meta.url).href
const { AdmissionTelemetry, telemetryLoaded } = (await import(
  dist
)) as typeof import('../../src/admission/telemetry.js')
await telemetryLoaded

const CALLS = 200_000
const telemetry = new AdmissionTelemetry('bench')
const runs: number[] = []
for (let run = 0; run < 8; run++) {
  const started = performance.now()
  for (let i = 0; i < CALLS; i++) {
    const request = { fencingToken: i, permits: 1000 }
    telemetry.decided('admitted', '*', false, Date.now(), request)
    telemetry.released(request)
  }
  if (run > 0) runs.push(((performance.now() - started) * 1e6) / CALLS) // the first warms up
}
runs.sort((a, b) => a - b)
process.stdout.write(`${JSON.stringify({ ns: runs[Math.floor(runs.length / 2)] })}\n`)
