// The report of failed span exports (src/gateway/ops/tracing.ts): at most one warning a minute,
// counting every failed export and dropped span exactly once, and one line when exports recover.
// A clock of the test's own: the minute is a rule, not something to wait for.
import { describe, expect, it } from 'vitest'
import { EXPORT_REPORT_EVERY_MS, ExportReport, type SpanExporter } from '../../src/gateway/ops/tracing.js'

function recorder() {
  const lines: { level: 'warn' | 'info'; message: string; fields: Record<string, unknown> }[] = []
  return {
    lines,
    log: {
      warn: (fields: object, message: string) =>
        lines.push({ level: 'warn', message, fields: fields as Record<string, unknown> }),
      info: (fields: object, message: string) =>
        lines.push({ level: 'info', message, fields: fields as Record<string, unknown> }),
    },
  }
}

describe('the span export report', () => {
  it('one warning at the first failure, the next a minute later with what failed between', () => {
    let now = 0
    const report = new ExportReport(() => now)
    const { lines, log } = recorder()
    report.reportTo(log)
    report.failed(3, new Error('connect ECONNREFUSED'))
    for (let i = 0; i < 10; i++) {
      now += 1000
      report.failed(2, new Error('connect ECONNREFUSED'))
    }
    expect(lines).toEqual([
      {
        level: 'warn',
        message: 'span export failed: spans dropped; requests are not affected',
        fields: { error: 'connect ECONNREFUSED', failedExports: 1, droppedSpans: 3 },
      },
    ])
    now = EXPORT_REPORT_EVERY_MS
    report.failed(1, undefined)
    expect(lines[1]?.fields).toEqual({ error: 'unknown', failedExports: 11, droppedSpans: 21 })
    now += 1
    report.failed(4, new Error('500'))
    report.succeeded()
    report.succeeded()
    expect(lines.slice(2)).toEqual([
      { level: 'info', message: 'span export recovered', fields: { failedExports: 1, droppedSpans: 4 } },
    ])
    // Failing again after a recovery: said at once, whatever the minute.
    report.failed(1, new Error('500'))
    expect(lines[3]?.fields).toEqual({ error: '500', failedExports: 1, droppedSpans: 1 })
  })

  it('an exporter wrapped: its results reach the report and the caller unchanged', async () => {
    const report = new ExportReport(() => 0)
    const { lines, log } = recorder()
    report.reportTo(log)
    const results = [{ code: 1, error: new Error('refused') }, { code: 0 }]
    let flushed = 0
    const inner: SpanExporter = {
      export: (_spans, done) => done(results.shift()!),
      shutdown: () => Promise.resolve(),
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
    expect(seen).toEqual([1, 0])
    expect(flushed).toBe(1)
    expect(lines.map((line) => line.message)).toEqual([
      'span export failed: spans dropped; requests are not affected',
      'span export recovered',
    ])
  })

  it('before the logger exists, failures are counted and told on the first line after', () => {
    let now = 0
    const report = new ExportReport(() => now)
    report.failed(2, new Error('early'))
    const { lines, log } = recorder()
    report.reportTo(log)
    now = 1
    report.failed(1, new Error('later'))
    expect(lines[0]?.fields).toEqual({ error: 'later', failedExports: 2, droppedSpans: 3 })
  })
})
