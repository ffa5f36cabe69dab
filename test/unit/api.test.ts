// The public API is what is documented (issue 28 #10): every export of every entry point in
// package.json's `exports` map, read with the TypeScript compiler (types included), is listed in
// docs/api.md under its entry, and nothing listed there is gone. An export added without a line in
// docs/api.md fails here.
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const PKG = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  exports: Record<string, string | { import: { default: string } }>
}
const ADAPTERS = ['tollgate/express', 'tollgate/koa', 'tollgate/fastify', 'tollgate/hono']

/** Entry id ('tollgate', 'tollgate/express', ...) -> its source file. */
const ENTRIES = Object.entries(PKG.exports).flatMap(([key, value]) =>
  typeof value === 'string'
    ? []
    : [
        {
          id: `tollgate${key.slice(1)}`,
          file: path.join(ROOT, value.import.default.replace('./dist/', 'src/').replace(/\.js$/, '.ts')),
        },
      ],
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

/** The names listed (`- \`name\` — ...`) under each `## ` heading of docs/api.md, by the entry ids the
 * heading names. */
function documented(): Map<string, Set<string>> {
  const text = readFileSync(path.join(ROOT, 'docs/api.md'), 'utf8')
  const byEntry = new Map<string, Set<string>>()
  let current: string[] = []
  for (const line of text.split('\n')) {
    if (line.startsWith('## ')) {
      current = [...line.matchAll(/`(tollgate[^`]*)`/g)].map((m) => m[1] as string)
      for (const id of current) if (!byEntry.has(id)) byEntry.set(id, new Set())
      continue
    }
    const name = /^- `([A-Za-z_$][\w$]*)` — \S/.exec(line)?.[1]
    if (name) for (const id of current) byEntry.get(id)!.add(name)
  }
  return byEntry
}

describe('the public API (docs/api.md)', () => {
  const exported = exportsOf(ENTRIES.map((entry) => entry.file))
  const listed = documented()

  it('names every entry point of the exports map', () => {
    expect([...listed.keys()].sort()).toEqual(ENTRIES.map((entry) => entry.id).sort())
    expect(ENTRIES.map((entry) => entry.id)).toEqual(expect.arrayContaining(ADAPTERS))
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
