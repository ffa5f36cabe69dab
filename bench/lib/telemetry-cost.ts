// What admission's OpenTelemetry hook (src/admission/telemetry.ts) costs per decision, measured
// directly: the end-to-end middleware rows cannot resolve a microsecond (bare Express's own CPU per
// request moves by more than that between rounds).
//   node --import tsx bench/lib/telemetry-cost.ts <absent|no-provider|providers>
// prints one JSON line, medians of 7 runs: { ns } per decided() + released() of an admitted request,
// and { gatewayNs } per request for the gateway's span (src/gateway/ops/tracing.ts: the check alone
// without a provider; a server span started and ended with one).
import { withOpenTelemetryProviders, withoutOpenTelemetry } from './otel-conditions.js'

const [variant] = process.argv.slice(2)
if (variant === 'absent') withoutOpenTelemetry()
else if (variant === 'providers') await withOpenTelemetryProviders()
else if (variant !== 'no-provider') {
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

const tracing = new URL('../../dist/gateway/ops/tracing.js', import.meta.url).href
const { endRequestSpan, startRequestSpan } = (await import(
  tracing
)) as typeof import('../../src/gateway/ops/tracing.js')
type Args<F extends (...args: never[]) => unknown> = Parameters<F>
const req = {
  method: 'GET',
  headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
} as unknown as Args<typeof startRequestSpan>[0]
const res = { headersSent: true, statusCode: 200 } as unknown as Args<typeof endRequestSpan>[1]
const gatewayRuns: number[] = []
for (let run = 0; run < 8; run++) {
  const started = performance.now()
  for (let i = 0; i < CALLS; i++) {
    const trace = startRequestSpan(req, 'bench')
    if (trace) endRequestSpan(trace, res, undefined)
  }
  if (run > 0) gatewayRuns.push(((performance.now() - started) * 1e6) / CALLS)
}
gatewayRuns.sort((a, b) => a - b)
const middle = (list: number[]) => list[Math.floor(list.length / 2)]
process.stdout.write(`${JSON.stringify({ ns: middle(runs), gatewayNs: middle(gatewayRuns) })}\n`)
