// The report of failed span exports (src/gateway/ops/tracing.ts): at most one line a minute, however
// the collector fails or flaps; every failed export and dropped span told exactly once (at the end
// of the minute, or at shutdown); "recovered" once an export goes through after a "failed" line. A
// clock and a timer of the test's own: the minute is a rule, not something to wait for.
import { describe, expect, it } from 'vitest'
import { EXPORT_REPORT_EVERY_MS, ExportReport, type SpanExporter } from '../../src/gateway/ops/tracing.js'

const FAILED = 'span export failed: spans dropped; requests are not affected'

function harness() {
  const clock = { now: 0 }
  const timers: { at: number; fn: () => void; cancelled: boolean }[] = []
  const report = new ExportReport(
    () => clock.now,
    (fn, ms) => {
      const timer = { at: clock.now + ms, fn, cancelled: false }
      timers.push(timer)
      return { cancel: () => (timer.cancelled = true) }
    },
  )
  const lines: { level: 'warn' | 'info'; message: string; fields: Record<string, unknown> }[] = []
  const log = {
    warn: (fields: object, message: string) =>
      lines.push({ level: 'warn', message, fields: fields as Record<string, unknown> }),
    info: (fields: object, message: string) =>
      lines.push({ level: 'info', message, fields: fields as Record<string, unknown> }),
  }
  /** Move the clock to `at`, running the timers due by then. */
  const advance = (at: number) => {
    clock.now = at
    for (const timer of timers.splice(0)) {
      if (timer.cancelled) continue
      if (timer.at <= at) timer.fn()
      else timers.push(timer)
    }
  }
  const pending = () => timers.filter((timer) => !timer.cancelled).length
  return { clock, report, lines, log, advance, pending }
}

describe('the span export report', () => {
  it('a collector down: one warning at once, the next when the minute ends, with what failed between', () => {
    const { clock, report, lines, log, advance, pending } = harness()
    report.reportTo(log)
    report.failed(3, new Error('connect ECONNREFUSED'))
    for (let i = 0; i < 10; i++) {
      clock.now += 1000
      report.failed(2, new Error('connect ECONNREFUSED'))
    }
    expect(lines).toEqual([
      {
        level: 'warn',
        message: FAILED,
        fields: { error: 'connect ECONNREFUSED', failedExports: 1, droppedSpans: 3, stillFailing: true },
      },
    ])
    expect(pending()).toBe(1) // one timer, however many failures wait for it
    advance(EXPORT_REPORT_EVERY_MS - 1)
    expect(lines).toHaveLength(1)
    advance(EXPORT_REPORT_EVERY_MS)
    expect(lines[1]).toEqual({
      level: 'warn',
      message: FAILED,
      fields: { error: 'connect ECONNREFUSED', failedExports: 10, droppedSpans: 20, stillFailing: true },
    })
  })

  it('a flapping collector: at most one line a minute, and every failure counted once', () => {
    const { clock, report, lines, log, advance } = harness()
    report.reportTo(log)
    for (let i = 0; i < 30; i++) {
      report.failed(2, new Error('500'))
      clock.now += 1000
      report.succeeded()
      clock.now += 1000
    }
    expect(lines.map((line) => line.message)).toEqual([FAILED])
    advance(EXPORT_REPORT_EVERY_MS)
    // Working again at the end of the minute: "recovered", with the 29 failures since the warning.
    expect(lines[1]).toEqual({
      level: 'info',
      message: 'span export recovered',
      fields: { failedExports: 29, droppedSpans: 58 },
    })
    const told = lines.reduce((sum, line) => sum + Number(line.fields.failedExports), 0)
    expect(told).toBe(30)
    advance(10 * EXPORT_REPORT_EVERY_MS)
    expect(lines).toHaveLength(2) // nothing owed: no more lines
  })

  it('failures that came and went within the minute are told as over (stillFailing: false)', () => {
    const { report, lines, log, advance } = harness()
    report.reportTo(log)
    report.failed(1, new Error('a'))
    report.succeeded() // the "recovered" line waits for the minute
    advance(EXPORT_REPORT_EVERY_MS)
    expect(lines.map((line) => line.message)).toEqual([FAILED, 'span export recovered'])
    advance(EXPORT_REPORT_EVERY_MS + 1000)
    report.failed(4, new Error('b'))
    report.succeeded()
    advance(2 * EXPORT_REPORT_EVERY_MS)
    expect(lines[2]?.fields).toEqual({ error: 'b', failedExports: 1, droppedSpans: 4, stillFailing: false })
    expect(lines).toHaveLength(3) // no "recovered" after a line that said it was over
  })

  it('at shutdown, flush() tells what the minute held back, at once', () => {
    const { clock, report, lines, log, pending } = harness()
    report.reportTo(log)
    report.failed(1, new Error('down'))
    clock.now = 5000
    report.failed(4096, new Error('down'))
    report.flush()
    expect(lines[1]?.fields).toEqual({
      error: 'down',
      failedExports: 1,
      droppedSpans: 4096,
      stillFailing: true,
    })
    report.flush()
    expect(lines).toHaveLength(2)
    expect(pending()).toBe(0)
  })

  it('before the logger exists, failures are counted and told when it comes', () => {
    const { report, lines, log } = harness()
    report.failed(2, new Error('early'))
    report.failed(1, new Error('early'))
    report.reportTo(log)
    expect(lines[0]?.fields).toEqual({
      error: 'early',
      failedExports: 2,
      droppedSpans: 3,
      stillFailing: true,
    })
  })

  it('an exporter wrapped: each result reaches the caller first and unchanged, then the report', async () => {
    const { report, lines } = harness()
    report.reportTo({
      warn: (fields: object, message: string) => {
        lines.push({ level: 'warn', message, fields: fields as Record<string, unknown> })
        throw new Error('a broken log')
      },
      info: () => {},
    })
    const results = [{ code: 1, error: new Error('refused') }, { code: 0 }]
    let flushed = 0
    let shut = 0
    const inner: SpanExporter = {
      export: (_spans, done) => done(results.shift()!),
      shutdown: () => {
        shut++
        return Promise.resolve()
      },
      forceFlush: () => {
        flushed++
        return Promise.resolve()
      },
    }
    const wrapped = report.around(inner)
    const seen: number[] = []
    wrapped.export([1, 2], (result) => seen.push(result.code))
    wrapped.export([3], (result) => seen.push(result.code))
    await wrapped.forceFlush?.()
    await wrapped.shutdown()
    expect(seen).toEqual([1, 0]) // a log that throws cost the caller nothing
    expect([flushed, shut]).toEqual([1, 1])
    expect(lines.map((line) => line.message)).toEqual([FAILED])
  })
})
