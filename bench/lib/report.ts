// Markdown report: header with the machine, one table per scenario, verdict lines.
import type { ScenarioResult, Table } from './scenario.js'

export interface RunMeta {
  date: string
  node: string
  redis: string
  ioredis: string
  cpu: string
  nproc: number
  os: string
  loadAverage: string
  loadAverageEnd: string
  git: string
  scenarios: string[]
  wallSeconds: number
}

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 })

/** 12,345 */
export function fmtInt(value: number): string {
  return Number.isFinite(value) ? integer.format(value) : 'n/a'
}

/** Milliseconds with 3 decimals: "0.123 ms". */
export function fmtMs(value: number): string {
  return Number.isFinite(value) ? `${value.toFixed(3)} ms` : 'n/a'
}

export function fmtFixed(value: number, digits = 2): string {
  return Number.isFinite(value) ? value.toFixed(digits) : 'n/a'
}

function cell(value: string | number): string {
  const text = typeof value === 'number' ? fmtFixed(value) : value
  return text.replace(/\|/g, '\\|').replace(/\r?\n/g, ' ')
}

const NUMERIC = /^[-+]?[\d,.]+(\s?(ms|µs|%|x))?$|^n\/a$|^$/

/** A markdown table, padded so it also reads well in a terminal; numeric columns are right-aligned. */
export function markdownTable(table: Table): string {
  const rows = table.rows.map((row) => table.columns.map((_, i) => cell(row[i] ?? '')))
  const header = table.columns.map(cell)
  const widths = header.map((title, i) => Math.max(3, title.length, ...rows.map((row) => row[i]!.length)))
  const right = header.map(
    (_, i) =>
      i > 0 &&
      rows.length > 0 &&
      rows.some((row) => row[i] !== '') &&
      rows.every((row) => NUMERIC.test(row[i]!)),
  )
  const line = (cells: string[]) =>
    `| ${cells.map((text, i) => (right[i] ? text.padStart(widths[i]!) : text.padEnd(widths[i]!))).join(' | ')} |`
  const rule = `| ${widths.map((width, i) => (right[i] ? `${'-'.repeat(width - 1)}:` : '-'.repeat(width))).join(' | ')} |`
  return [line(header), rule, ...rows.map(line)].join('\n')
}

export function verdictLine(result: ScenarioResult, verdict: ScenarioResult['verdicts'][number]): string {
  return `${verdict.pass ? 'PASS' : 'FAIL'} ${result.name}: ${verdict.target}: ${verdict.detail}`
}

export function renderReport(meta: RunMeta, results: readonly ScenarioResult[]): string {
  const out: string[] = []
  out.push('# Tollgate benchmarks', '')
  out.push(
    markdownTable({
      columns: ['', ''],
      rows: [
        ['date', meta.date],
        ['node', meta.node],
        ['redis', meta.redis],
        ['ioredis', meta.ioredis],
        ['cpu', meta.cpu],
        ['nproc', String(meta.nproc)],
        ['os', meta.os],
        ['load average at start / end', `${meta.loadAverage} / ${meta.loadAverageEnd}`],
        ['git', meta.git],
        ['scenarios', meta.scenarios.join(', ')],
        ['wall time', `${meta.wallSeconds.toFixed(1)} s`],
      ],
    }),
  )
  for (const result of results) {
    out.push('', `## ${result.name}: ${result.title}`, '')
    if (result.error) {
      out.push(`**ERROR**: ${result.error}`)
      continue
    }
    for (const table of result.tables) out.push(markdownTable(table), '')
    for (const note of result.notes) out.push(`- ${note}`)
  }
  out.push('', '## Verdicts', '')
  let any = false
  for (const result of results) {
    for (const verdict of result.verdicts) {
      out.push(`- ${verdictLine(result, verdict)}`)
      any = true
    }
    if (result.error) {
      out.push(`- ERROR ${result.name}: ${result.error}`)
      any = true
    }
  }
  if (!any) out.push('- (no targets in the scenarios run)')
  return `${out.join('\n')}\n`
}
