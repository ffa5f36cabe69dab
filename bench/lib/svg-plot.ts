// Line charts as a hand-written SVG (no plotting dependency): a grid of panels, each with axes, ticks,
// labels, a legend and its lines. Enough for time series in a benchmark's results.

export interface Line {
  name: string
  color: string
  /** [x, y] points in data units, x ascending. */
  points: [number, number][]
  /** Stroke width, px (default 1.5). */
  width?: number
  /** SVG stroke-dasharray, e.g. '6 4' (default solid). */
  dash?: string
  /** Hold each value until the next point (a limit, a capacity) instead of joining points. */
  step?: boolean
}

export interface Marker {
  /** x in data units: a vertical dashed line with a label at its top. */
  x: number
  label: string
}

export interface Panel {
  title: string
  xLabel: string
  yLabel: string
  xMax: number
  /** Default: the highest y of the lines, with 10 % headroom. */
  yMax?: number
  lines: Line[]
  markers?: Marker[]
}

export interface Figure {
  title: string
  /** Rows of panels (every row as wide as the figure; panels of a row share its width). */
  rows: Panel[][]
  /** Lines of small print under the title. */
  subtitle?: string[]
}

const PANEL_W = 600
const PANEL_H = 250
const MARGIN = { left: 64, right: 16, top: 28, bottom: 44 }
const FONT = 'font-family="Helvetica, Arial, sans-serif"'

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
}

/** A round tick step that gives about `count` ticks up to `max`. */
function tickStep(max: number, count: number): number {
  const raw = max / count
  const power = 10 ** Math.floor(Math.log10(raw))
  for (const factor of [1, 2, 2.5, 5, 10]) if (raw <= factor * power) return factor * power
  return 10 * power
}

function fmt(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1)
}

function renderPanel(panel: Panel, x0: number, y0: number): string {
  const w = PANEL_W - MARGIN.left - MARGIN.right
  const h = PANEL_H - MARGIN.top - MARGIN.bottom
  const left = x0 + MARGIN.left
  const top = y0 + MARGIN.top
  const highest = Math.max(1, ...panel.lines.flatMap((line) => line.points.map((p) => p[1])))
  const yStep = tickStep(panel.yMax ?? highest * 1.1, 5)
  const yMax = Math.ceil((panel.yMax ?? highest * 1.1) / yStep) * yStep
  const xStep = tickStep(panel.xMax, 8)
  const sx = (x: number) => left + (Math.min(Math.max(x, 0), panel.xMax) / panel.xMax) * w
  const sy = (y: number) => top + h - (Math.min(Math.max(y, 0), yMax) / yMax) * h
  const out: string[] = []
  out.push(
    `<text x="${left}" y="${y0 + 18}" font-size="13" font-weight="bold" ${FONT}>${escape(panel.title)}</text>`,
  )
  // Grid and ticks.
  for (let y = 0; y <= yMax + 1e-9; y += yStep) {
    out.push(`<line x1="${left}" x2="${left + w}" y1="${sy(y)}" y2="${sy(y)}" stroke="#e5e5e5"/>`)
    out.push(
      `<text x="${left - 6}" y="${sy(y) + 4}" font-size="11" text-anchor="end" ${FONT}>${fmt(y)}</text>`,
    )
  }
  for (let x = 0; x <= panel.xMax + 1e-9; x += xStep) {
    out.push(`<line x1="${sx(x)}" x2="${sx(x)}" y1="${top}" y2="${top + h}" stroke="#f0f0f0"/>`)
    out.push(
      `<text x="${sx(x)}" y="${top + h + 16}" font-size="11" text-anchor="middle" ${FONT}>${fmt(x)}</text>`,
    )
  }
  out.push(`<rect x="${left}" y="${top}" width="${w}" height="${h}" fill="none" stroke="#888"/>`)
  out.push(
    `<text x="${left + w / 2}" y="${top + h + 34}" font-size="12" text-anchor="middle" ${FONT}>${escape(panel.xLabel)}</text>`,
  )
  const yMid = top + h / 2
  out.push(
    `<text x="${x0 + 16}" y="${yMid}" font-size="12" text-anchor="middle" transform="rotate(-90 ${x0 + 16} ${yMid})" ${FONT}>${escape(panel.yLabel)}</text>`,
  )
  for (const marker of panel.markers ?? []) {
    const x = sx(marker.x)
    out.push(`<line x1="${x}" x2="${x}" y1="${top}" y2="${top + h}" stroke="#999" stroke-dasharray="2 3"/>`)
    out.push(
      `<text x="${x + 3}" y="${top + h - 4}" font-size="10" fill="#555" ${FONT}>${escape(marker.label)}</text>`,
    )
  }
  // Lines, clipped to the plot area.
  const clip = `clip-${Math.round(x0)}-${Math.round(y0)}`
  out.push(`<clipPath id="${clip}"><rect x="${left}" y="${top}" width="${w}" height="${h}"/></clipPath>`)
  for (const line of panel.lines) {
    if (line.points.length === 0) continue
    const coords: string[] = []
    let previous: [number, number] | undefined
    for (const point of line.points) {
      if (line.step && previous) coords.push(`${sx(point[0]).toFixed(1)},${sy(previous[1]).toFixed(1)}`)
      coords.push(`${sx(point[0]).toFixed(1)},${sy(point[1]).toFixed(1)}`)
      previous = point
    }
    out.push(
      `<polyline clip-path="url(#${clip})" fill="none" stroke="${line.color}" stroke-width="${line.width ?? 1.5}"${line.dash ? ` stroke-dasharray="${line.dash}"` : ''} stroke-linejoin="round" points="${coords.join(' ')}"/>`,
    )
  }
  // Legend: top right, on a white box so lines under it stay readable around it.
  const entries = panel.lines.filter((line) => line.points.length > 0)
  const legendW = Math.max(...entries.map((line) => line.name.length), 4) * 6 + 34
  const legendX = left + w - legendW - 6
  const legendY = top + 6
  out.push(
    `<rect x="${legendX}" y="${legendY}" width="${legendW}" height="${entries.length * 15 + 6}" fill="white" fill-opacity="0.85" stroke="#ccc"/>`,
  )
  entries.forEach((line, i) => {
    const y = legendY + 13 + i * 15
    out.push(
      `<line x1="${legendX + 6}" x2="${legendX + 26}" y1="${y - 4}" y2="${y - 4}" stroke="${line.color}" stroke-width="${Math.max(2, line.width ?? 1.5)}"${line.dash ? ` stroke-dasharray="${line.dash}"` : ''}/>`,
    )
    out.push(`<text x="${legendX + 30}" y="${y}" font-size="10.5" ${FONT}>${escape(line.name)}</text>`)
  })
  return out.join('\n')
}

export function renderFigure(figure: Figure): string {
  const columns = Math.max(...figure.rows.map((row) => row.length))
  const header = 34 + (figure.subtitle?.length ?? 0) * 15
  const width = columns * PANEL_W
  const height = header + figure.rows.length * PANEL_H
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="22" font-size="16" font-weight="bold" text-anchor="middle" ${FONT}>${escape(figure.title)}</text>`,
  ]
  figure.subtitle?.forEach((line, i) => {
    out.push(
      `<text x="${width / 2}" y="${40 + i * 15}" font-size="11" fill="#444" text-anchor="middle" ${FONT}>${escape(line)}</text>`,
    )
  })
  figure.rows.forEach((row, r) => {
    row.forEach((panel, c) => out.push(renderPanel(panel, c * PANEL_W, header + r * PANEL_H)))
  })
  out.push('</svg>')
  return `${out.join('\n')}\n`
}
