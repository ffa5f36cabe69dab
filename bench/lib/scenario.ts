// What a benchmark scenario is: a name, a run function and the result it hands to the report.
// Scenarios live in bench/scenarios/*.ts and are listed in bench/scenarios/index.ts.
import type { BenchRedis } from './redis.js'

export interface BenchContext {
  /** The run's private redis-server; flushed before every scenario. Connections made through it are
   * closed after the scenario. */
  redis: BenchRedis
  /** Progress line on stderr (stdout carries the report). */
  log(line: string): void
}

export interface Table {
  columns: string[]
  rows: (string | number)[][]
}

export interface Verdict {
  /** What was required, e.g. "owner changes/s >= 2000". */
  target: string
  pass: boolean
  /** The measured numbers behind the verdict. */
  detail: string
}

export interface ScenarioOutput {
  tables: Table[]
  verdicts: Verdict[]
  notes: string[]
  /** Raw numbers for latest.json. */
  data: Record<string, unknown>
}

export interface Scenario {
  name: string
  title: string
  /** Rough wall-clock seconds, shown before the run. */
  seconds: number
  run(ctx: BenchContext): Promise<ScenarioOutput>
}

export interface ScenarioResult extends ScenarioOutput {
  name: string
  title: string
  wallSeconds: number
  error?: string
}
