// wrk as a load generator: a C program that leaves more of the CPU to the servers under test than a
// Node generator, and reports latency in µs. Parsed from its text report (--latency).
import { execFile } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import path from 'node:path'
import autocannon from 'autocannon'

export interface WrkResult {
  requests: number
  seconds: number
  requestsPerSecond: number
  p50Ms: number
  p99Ms: number
  /** Socket errors (connect, read, write, timeout) plus non-2xx/3xx responses. */
  errors: number
}

export function wrkAvailable(): boolean {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    try {
      accessSync(path.join(dir, 'wrk'), constants.X_OK)
      return true
    } catch {
      // not here
    }
  }
  return false
}

function toMs(value: string, unit: string): number {
  const n = Number(value)
  if (unit === 'us') return n / 1000
  if (unit === 's') return n * 1000
  if (unit === 'm') return n * 60_000
  return n
}

export function runWrk(url: string, seconds: number, connections: number, threads = 1): Promise<WrkResult> {
  return new Promise((resolve, reject) => {
    execFile(
      'wrk',
      [`-t${threads}`, `-c${connections}`, `-d${seconds}s`, '--latency', url],
      { timeout: (seconds + 30) * 1000 },
      (error, stdout) => {
        if (error) return reject(error)
        const requests = /(\d+) requests in ([\d.]+)(\w+)/.exec(stdout)
        const p50 = /^\s+50%\s+([\d.]+)(\w+)/m.exec(stdout)
        const p99 = /^\s+99%\s+([\d.]+)(\w+)/m.exec(stdout)
        if (!requests || !p50 || !p99) return reject(new Error(`unexpected wrk output:\n${stdout}`))
        const duration = toMs(requests[2]!, requests[3]!) / 1000
        const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(
          stdout,
        )
        const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(stdout)
        const errors =
          (socketErrors ? socketErrors.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0) +
          (non2xx ? Number(non2xx[1]) : 0)
        resolve({
          requests: Number(requests[1]),
          seconds: duration,
          requestsPerSecond: Number(requests[1]) / duration,
          p50Ms: toMs(p50[1]!, p50[2]!),
          p99Ms: toMs(p99[1]!, p99[2]!),
          errors,
        })
      },
    )
  })
}

/** What one load round measured, from wrk or autocannon. */
export interface LoadRound {
  rps: number
  p50: number
  p99: number
  requests: number
  errors: number
}

/** One load round: wrk when installed, else autocannon (then latency has ms resolution). */
export async function loadRound(url: string, seconds: number, connections: number): Promise<LoadRound> {
  if (wrkAvailable()) {
    const result = await runWrk(url, seconds, connections)
    return {
      rps: result.requestsPerSecond,
      p50: result.p50Ms,
      p99: result.p99Ms,
      requests: result.requests,
      errors: result.errors,
    }
  }
  const result = await autocannon({ url, connections, duration: seconds })
  return {
    rps: result.requests.total / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: result.requests.total,
    errors: result.non2xx + result.errors,
  }
}
