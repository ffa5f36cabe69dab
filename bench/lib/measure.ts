// Bounded, time-boxed operation loops and A/B alternation between variants of one operation.
import type { BenchRedis, ServerDelta } from './redis.js'
import { diffSnapshots, sumDeltas } from './redis.js'
import { Samples } from './stats.js'

export interface LoopResult {
  ops: number
  elapsedMs: number
  /** Latency of each op, ms. */
  latencies: Samples
  /** CPU time of this Node process (user + system) during the loops, ms. */
  clientCpuMs: number
}

/** No op finishes in under 1 µs: this caps every loop even if the clock misbehaved. */
const MAX_OPS_PER_MS = 1000

/**
 * Run `concurrency` loops of `op(loop)` for `durationMs`, each timing every op. The first error stops
 * every loop and is rethrown once they have all finished (nothing keeps running in the background).
 */
export async function timedLoops(
  concurrency: number,
  durationMs: number,
  op: (loop: number) => Promise<void>,
): Promise<LoopResult> {
  const latencies = new Samples()
  const maxOpsPerLoop = Math.ceil(durationMs * MAX_OPS_PER_MS)
  let failure: { error: unknown } | undefined
  const cpuBefore = process.cpuUsage()
  const started = performance.now()
  const end = started + durationMs
  const loop = async (index: number) => {
    for (let i = 0; i < maxOpsPerLoop && !failure; i++) {
      const t0 = performance.now()
      if (t0 >= end) return
      try {
        await op(index)
      } catch (error) {
        failure ??= { error }
        return
      }
      latencies.push(performance.now() - t0)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, (_, index) => loop(index)))
  const elapsedMs = performance.now() - started
  const cpu = process.cpuUsage(cpuBefore)
  if (failure) throw failure.error
  return { ops: latencies.count, elapsedMs, latencies, clientCpuMs: (cpu.user + cpu.system) / 1000 }
}

export interface Variant {
  name: string
  concurrency: number
  op(loop: number): Promise<void>
}

export interface VariantTotals {
  name: string
  ops: number
  elapsedMs: number
  latencies: Samples
  clientCpuMs: number
  server: ServerDelta
  /** ops/s of each measured round, in run order. */
  roundOpsPerSec: number[]
}

export interface AlternateOptions {
  warmupMs: number
  rounds: number
  roundMs: number
}

/**
 * Warm every variant up, then run `rounds` rounds in which every variant runs `roundMs`; the order
 * flips every round (A B, B A, A B, ...) so drift and noise of the machine hit all variants alike.
 * Server counters are read around every measured run (outside the timed window).
 */
export async function alternate(
  redis: BenchRedis,
  variants: readonly Variant[],
  options: AlternateOptions,
): Promise<VariantTotals[]> {
  for (const variant of variants) await timedLoops(variant.concurrency, options.warmupMs, variant.op)
  const totals = variants.map((variant): VariantTotals & { deltas: ServerDelta[] } => ({
    name: variant.name,
    ops: 0,
    elapsedMs: 0,
    latencies: new Samples(),
    clientCpuMs: 0,
    server: sumDeltas([]),
    roundOpsPerSec: [],
    deltas: [],
  }))
  for (let round = 0; round < options.rounds; round++) {
    const order = variants.map((_, i) => i)
    if (round % 2 === 1) order.reverse()
    for (const i of order) {
      const variant = variants[i] as Variant
      const total = totals[i] as (typeof totals)[number]
      const before = await redis.snapshot()
      const result = await timedLoops(variant.concurrency, options.roundMs, variant.op)
      const after = await redis.snapshot()
      total.ops += result.ops
      total.elapsedMs += result.elapsedMs
      total.latencies.add(result.latencies)
      total.clientCpuMs += result.clientCpuMs
      total.deltas.push(diffSnapshots(before, after))
      total.roundOpsPerSec.push((result.ops / result.elapsedMs) * 1000)
    }
  }
  return totals.map(({ deltas, ...total }) => ({ ...total, server: sumDeltas(deltas) }))
}
