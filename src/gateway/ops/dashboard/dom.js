// The dashboard page's DOM helpers: look elements up, make them, and write text (textContent only:
// bucket names and paths are request data, never markup). index.html loads dom.js, chart.js,
// tables.js and app.js in that order, as classic scripts sharing one scope.
'use strict'

/** @typedef {import('../dashboard-data.js').DashboardData} Data */
/** @typedef {Data['routes'][number]} Route */
/** @typedef {Route['history'][number]} Point */

/** The element of `id`: index.html has every one this page asks for.
 * @param {string} id
 * @returns {HTMLElement} */
function byId(id) {
  const found = document.getElementById(id)
  if (!found) throw new Error(`index.html has no #${id}`)
  return found
}

/** The body of table `id`, as index.html has it.
 * @param {string} id
 * @returns {HTMLTableSectionElement} */
function tbody(id) {
  const found = document.querySelector(`#${id} tbody`)
  if (!(found instanceof HTMLTableSectionElement)) throw new Error(`index.html has no #${id} tbody`)
  return found
}

function el(tag, attributes, ...children) {
  const node = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value !== undefined && value !== false) node.setAttribute(name, value === true ? '' : String(value))
  }
  for (const child of children) node.append(child)
  return node
}

function svg(tag, attributes) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag)
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value))
  return node
}

function text(node, value) {
  const shown = value === undefined || value === null ? '–' : String(value)
  if (node.textContent !== shown) node.textContent = shown
}

function ms(value) {
  if (value === undefined || value === null) return '–'
  return value < 10 ? `${value.toFixed(1)} ms` : `${Math.round(value)} ms`
}

function ago(at) {
  if (!at) return '–'
  const seconds = Math.max(0, Math.round((Date.now() - at) / 1000))
  const when = new Date(at).toLocaleTimeString()
  return seconds < 120 ? `${when} (${seconds} s ago)` : when
}

/** The store's state (a live region: it speaks when the state changes, not at every poll). */
function say(message, bad) {
  const status = byId('status')
  text(status, message)
  status.className = bad ? 'bad' : ''
}

/** The result of what the user did (its own live region: a poll never writes over it). */
function tell(message, bad) {
  const result = byId('result')
  text(result, message)
  result.className = bad ? 'bad' : ''
}

/** A figure, or – where it was not read. */
function figure(value) {
  return value === null || value === undefined ? '–' : String(value)
}

function pairs(body, entries) {
  body.replaceChildren(
    ...entries.map(([name, value]) => el('tr', {}, el('th', { scope: 'row' }, name), el('td', {}, value))),
  )
}
