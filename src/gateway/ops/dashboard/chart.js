// The dashboard page's chart of a route: in flight, waiting and the limit in force over its last
// minutes, an SVG with a scale on each axis (made with dom.js's helpers).
'use strict'

/** A route's last minutes in `figure` (after its caption): in flight, waiting and the limit in force,
 * one point a second, with a scale on each axis.
 * @param {HTMLElement} figure @param {Route} route */
function drawChart(figure, route) {
  const width = 520
  const height = 170
  const left = 40
  const right = 10
  const top = 10
  const bottom = 24
  const points = route.history
  const peak = Math.max(1, ...points.map((p) => Math.max(p.fleet ?? p.local, p.queued ?? 0, p.limit ?? 0)))
  // A scale of round steps: 1, 2 or 5 times a power of ten, at most 4 steps up to the peak.
  const power = 10 ** Math.floor(Math.log10(peak / 4))
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s * 4 >= peak) ?? power * 10
  const most = Math.max(step, Math.ceil(peak / step) * step)
  const now = points.length > 0 ? /** @type {Point} */ (points[points.length - 1]).t : Date.now()
  // The last 5 minutes; a replica up for less shows its first minute across the chart.
  const span = Math.min(
    300_000,
    Math.max(60_000, points.length > 0 ? now - /** @type {Point} */ (points[0]).t : 0),
  )
  const x = (t) => left + ((width - left - right) * (t - (now - span))) / span
  const y = (value) => height - bottom - ((height - top - bottom) * value) / most
  const line = (key, fallback, className) => {
    const coordinates = points
      .filter((p) => (p[key] ?? p[fallback]) !== null && (p[key] ?? p[fallback]) !== undefined)
      .map((p) => `${x(p.t).toFixed(1)},${y(p[key] ?? p[fallback]).toFixed(1)}`)
      .join(' ')
    return svg('polyline', { points: coordinates, class: className })
  }
  /** @param {number} atX @param {number} atY @param {string} value @param {string} anchor */
  const label = (atX, atY, value, anchor) => {
    const node = svg('text', { x: atX, y: atY, 'text-anchor': anchor, class: 'axis' })
    node.textContent = value
    return node
  }
  const marks = []
  for (let value = 0; value <= most; value += step) {
    marks.push(svg('line', { x1: left, x2: width - right, y1: y(value), y2: y(value), class: 'grid' }))
    marks.push(label(left - 6, y(value) + 4, String(value), 'end'))
  }
  const minutes = span / 60_000
  for (const ago of [minutes, minutes / 2, 0]) {
    const atX = x(now - ago * 60_000)
    marks.push(svg('line', { x1: atX, x2: atX, y1: top, y2: height - bottom, class: 'grid' }))
    const text = ago === 0 ? 'now' : `−${Number.isInteger(ago) ? ago : ago.toFixed(1)} min`
    marks.push(label(atX, height - 6, text, ago === minutes ? 'start' : ago === 0 ? 'end' : 'middle'))
  }
  /** @type {Partial<Point>} */
  const last = points[points.length - 1] || {}
  const summary = `${route.name}: in flight ${last.fleet ?? last.local ?? 0}, waiting ${last.queued ?? 0}, limit ${last.limit ?? '–'}; at most ${peak} in the last ${Math.round(span / 60_000)} minute(s)`
  const chart = svg('svg', {
    class: 'chart',
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': summary,
  })
  const title = svg('title')
  title.textContent = summary
  chart.append(
    title,
    ...marks,
    line('limit', 'limit', 'limit'),
    line('queued', 'queued', 'waiting'),
    line('fleet', 'local', 'fleet'),
  )
  const caption = figure.firstElementChild
  figure.replaceChildren(...(caption ? [caption] : []), chart)
}
