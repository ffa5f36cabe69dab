// The public API is what is documented (issue 28 #10, issue 42): every export of every entry point in
// the `exports` maps of both packages (tollgate, tollgate-gateway), read with the TypeScript compiler (types included), has its own `###`
// heading in docs/api.md under the `##` heading of its entry, and no such heading names an export that is
// gone. An export added without a `###` in docs/api.md fails here.
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
type Manifest = { name: string; exports: Record<string, string | { import: { default: string } }> }
/** The two packages: tollgate (the library, at the root) and tollgate-gateway (packages/gateway, the
 * same compiled tree). */
const PACKAGES = ['package.json', 'packages/gateway/package.json'].map(
  (file) => JSON.parse(readFileSync(path.join(ROOT, file), 'utf8')) as Manifest,
)
const ADAPTERS = ['tollgate/express', 'tollgate/koa', 'tollgate/fastify', 'tollgate/hono']

/** Entry id ('tollgate', 'tollgate/express', ..., 'tollgate-gateway') -> its source file. */
const ENTRIES = PACKAGES.flatMap((pkg) =>
  Object.entries(pkg.exports).flatMap(([key, value]) =>
    typeof value === 'string'
      ? []
      : [
          {
            id: `${pkg.name}${key.slice(1)}`,
            file: path.join(ROOT, value.import.default.replace('./dist/', 'src/').replace(/\.js$/, '.ts')),
          },
        ],
  ),
)

function exportsOf(files: string[]): Map<string, string[]> {
  const program = ts.createProgram(files, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
  })
  const checker = program.getTypeChecker()
  const out = new Map<string, string[]>()
  for (const file of files) {
    const source = program.getSourceFile(file)
    if (!source) throw new Error(`not found: ${file}`)
    const symbol = checker.getSymbolAtLocation(source)
    out.set(file, symbol ? checker.getExportsOfModule(symbol).map((s) => s.name) : [])
  }
  return out
}

/** What docs/api.md documents: under each `## ` heading (by the entry ids it names in backticks), the
 * export each `### ` heading names, i.e. the identifier its first backticked text starts with
 * (### `createSemaphore(store, name, options)` → `Semaphore` documents `createSemaphore`). A `###`
 * without backticks is a concept section (### One name, one lock), not an export. Fenced code is
 * skipped. */
function documented(): {
  byEntry: Map<string, Set<string>>
  repeated: string[]
  outside: string[]
} {
  const text = readFileSync(path.join(ROOT, 'docs/api.md'), 'utf8')
  const byEntry = new Map<string, Set<string>>()
  /** `entry: name` of a name with two `###` under one entry. */
  const repeated: string[] = []
  /** Export headings under a `##` that names no entry. */
  const outside: string[] = []
  let current: string[] = []
  let fenced = false
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced
    if (fenced) continue
    if (line.startsWith('## ')) {
      current = [...line.matchAll(/`(tollgate[^`]*)`/g)].map((m) => m[1] as string)
      for (const id of current) if (!byEntry.has(id)) byEntry.set(id, new Set())
      continue
    }
    if (!line.startsWith('### ')) continue
    const code = /`([^`]+)`/.exec(line)?.[1]
    const name = code === undefined ? undefined : /^[A-Za-z_$][\w$]*/.exec(code)?.[0]
    if (name === undefined) continue
    if (current.length === 0) outside.push(line)
    for (const id of current) {
      const names = byEntry.get(id)!
      if (names.has(name)) repeated.push(`${id}: ${name}`)
      names.add(name)
    }
  }
  return { byEntry, repeated, outside }
}

describe('the public API (docs/api.md)', () => {
  const exported = exportsOf(ENTRIES.map((entry) => entry.file))
  const { byEntry: listed, repeated, outside } = documented()

  it('names every entry point of the exports map', () => {
    expect([...listed.keys()].sort()).toEqual(ENTRIES.map((entry) => entry.id).sort())
    expect(ENTRIES.map((entry) => entry.id)).toEqual(expect.arrayContaining(ADAPTERS))
  })

  it('has one `###` per export, each under the `##` of an entry point', () => {
    expect(repeated, 'documented twice under one entry').toEqual([])
    expect(outside, 'an export heading under no entry point').toEqual([])
  })

  it.each(ENTRIES)(
    '$id: every export is documented, and every documented name is exported',
    ({ id, file }) => {
      const names = [...new Set(exported.get(file))].sort()
      const docs = [...(listed.get(id) ?? [])].sort()
      expect(
        names.filter((name) => !docs.includes(name)),
        'exported but not in docs/api.md',
      ).toEqual([])
      expect(
        docs.filter((name) => !names.includes(name)),
        'in docs/api.md but not exported',
      ).toEqual([])
    },
  )
})
