// Small statistics helpers for the benchmarks: latency samples, percentiles, fairness.

/** A growable buffer of latency samples (ms), cheap to push into inside a hot loop. */
export class Samples {
  private buffer: Float64Array
  private length = 0

  constructor(capacity = 1 << 16) {
    this.buffer = new Float64Array(capacity)
  }

  get count(): number {
    return this.length
  }

  push(value: number): void {
    if (this.length === this.buffer.length) {
      const bigger = new Float64Array(this.buffer.length * 2)
      bigger.set(this.buffer)
      this.buffer = bigger
    }
    this.buffer[this.length++] = value
  }

  /** Append every sample of `other`. */
  add(other: Samples): void {
    for (const value of other.values()) this.push(value)
  }

  values(): Float64Array {
    return this.buffer.subarray(0, this.length)
  }

  /** A sorted copy of the samples. */
  sorted(): Float64Array {
    return Float64Array.from(this.values()).sort()
  }
}

/** Nearest-rank percentile (p in 0..100) of an ascending array; NaN when empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))] as number
}

export interface Summary {
  count: number
  mean: number
  p50: number
  p99: number
  max: number
}

export function summarize(samples: Samples): Summary {
  const sorted = samples.sorted()
  let sum = 0
  for (const value of sorted) sum += value
  return {
    count: sorted.length,
    mean: sorted.length === 0 ? Number.NaN : sum / sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.length === 0 ? Number.NaN : (sorted[sorted.length - 1] as number),
  }
}

/**
 * Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when every share is equal, 1/n when one party gets
 * everything.
 */
export function jainIndex(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN
  let sum = 0
  let squares = 0
  for (const value of values) {
    sum += value
    squares += value * value
  }
  return squares === 0 ? 1 : (sum * sum) / (values.length * squares)
}

export function minMax(values: readonly number[]): { min: number; max: number } {
  return { min: Math.min(...values), max: Math.max(...values) }
}

/** The middle value (the upper one of an even count), NaN for none: medians over bench rounds. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}
