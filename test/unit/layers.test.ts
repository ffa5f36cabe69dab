// The layout is a rule, checked: dependencies point down only (gateway and middleware -> admission ->
// primitives -> core), core's parts keep to their side (protocol knows nobody; the client knows the
// protocol, not a backend; a backend knows the protocol, not the client), and no import cycle exists
// anywhere in src/, type-only imports included. The gateway's lean paths (src/gateway/http/lean/) are
// imported only by the server (the front end) and the proxy core (the upstream pool).
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return sources(file)
    return entry.name.endsWith('.ts') ? [file] : []
  })
}

/** Relative imports of a file (static, dynamic and type-only), as absolute .ts paths. A generated
 * module (its first line says so) holds other files' text, whose imports are not its own. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8')
  if (text.startsWith('// GENERATED')) return []
  const found = [
    ...text.matchAll(/(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'/g),
    ...text.matchAll(/import\(\s*'(\.[^']+)'\s*\)/g),
  ]
  return found.map((m) => path.resolve(path.dirname(file), (m[1] as string).replace(/\.js$/, '.ts')))
}

const rel = (file: string) => path.relative(SRC, file)
const files = sources(SRC)
const graph = new Map(files.map((file) => [file, importsOf(file)]))

/** The layer of a file: its top folder under src/ (index.ts is the package's front door). */
const LAYERS: Record<string, number> = { core: 0, primitives: 1, admission: 2, middleware: 3, gateway: 3 }
function layerOf(file: string): string {
  return rel(file).split(path.sep)[0] as string
}

describe('the layout', () => {
  it('every relative import points at a file that exists', () => {
    const missing = [...graph].flatMap(([file, imports]) =>
      imports.filter((target) => !graph.has(target)).map((target) => `${rel(file)} -> ${rel(target)}`),
    )
    expect(missing).toEqual([])
  })

  it('depends only downward: gateway and middleware -> admission -> primitives -> core', () => {
    const wrong: string[] = []
    for (const [file, imports] of graph) {
      const from = layerOf(file)
      if (!(from in LAYERS)) continue
      for (const target of imports) {
        const to = layerOf(target)
        const up = (LAYERS[to] ?? 99) > (LAYERS[from] as number)
        const sideways = from !== to && (LAYERS[to] ?? 99) === LAYERS[from]
        if (up || sideways) wrong.push(`${rel(file)} -> ${rel(target)}`)
      }
    }
    expect(wrong).toEqual([])
  })

  it("keeps core's parts apart: protocol knows no part, client no backend, a backend no client", () => {
    const part = (file: string) => {
      const parts = rel(file).split(path.sep)
      return parts[0] === 'core' && parts.length > 2 ? (parts[1] as string) : undefined
    }
    const forbidden: Record<string, string[]> = {
      protocol: ['client', 'redis', 'memory'],
      client: ['redis', 'memory'],
      redis: ['client', 'memory'],
      memory: ['client', 'redis'],
    }
    const wrong: string[] = []
    for (const [file, imports] of graph) {
      const from = part(file)
      if (!from) continue
      for (const target of imports) {
        const to = part(target)
        if (to && forbidden[from]?.includes(to)) wrong.push(`${rel(file)} -> ${rel(target)}`)
      }
    }
    expect(wrong).toEqual([])
  })

  it("keeps the gateway's lean paths in their room: only the server and the proxy core import http/lean/", () => {
    const lean = path.join(SRC, 'gateway/http/lean') + path.sep
    const allowed = new Set(
      ['gateway/server.ts', 'gateway/http/proxy.ts'].map((file) => path.join(SRC, file)),
    )
    const wrong = [...graph].flatMap(([file, imports]) =>
      file.startsWith(lean) || allowed.has(file)
        ? []
        : imports
            .filter((target) => target.startsWith(lean))
            .map((target) => `${rel(file)} -> ${rel(target)}`),
    )
    expect(wrong).toEqual([])
    // Everything past the front end sees the one contract both paths serve, not a lean type.
    expect(graph.get(path.join(SRC, 'gateway/http/client.ts'))).toEqual([])
  })

  it('has no import cycle (type-only imports included)', () => {
    const cycles: string[] = []
    const state = new Map<string, 'visiting' | 'done'>()
    const stack: string[] = []
    const visit = (file: string) => {
      state.set(file, 'visiting')
      stack.push(file)
      for (const target of graph.get(file) ?? []) {
        if (state.get(target) === 'visiting') {
          cycles.push([...stack.slice(stack.indexOf(target)), target].map(rel).join(' -> '))
        } else if (!state.has(target) && graph.has(target)) {
          visit(target)
        }
      }
      stack.pop()
      state.set(file, 'done')
    }
    for (const file of files) if (!state.has(file)) visit(file)
    expect(cycles).toEqual([])
  })
})
