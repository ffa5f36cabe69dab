// Every pointer in the tree leads somewhere: a Markdown link (its file, and its #anchor's heading),
// a prose pointer `docs/<doc>.md, "<heading>"` in code, tests, docs and benches (a heading, or a paragraph
// that opens in bold), and a path in a comment (src/..., lua/..., docs/...). A file renamed or a
// heading reworded fails here, naming the pointer.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { expect, it } from 'vitest'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
/** Generated files, and bench results (they quote the tree as it was when they ran). */
const SKIPPED = /(^|\/)node_modules\/|^bench\/results\/|lua-sources\.ts$|dashboard-assets\.ts$/

function files(dir: string, extensions: readonly string[]): string[] {
  return readdirSync(path.join(ROOT, dir), { recursive: true })
    .map((file) => path.join(dir, String(file)))
    .filter((file) => extensions.some((extension) => file.endsWith(extension)) && !SKIPPED.test(file))
}

const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8')
const withoutCode = (markdown: string) => markdown.replace(/```[\s\S]*?```/g, '')

const MARKDOWN = [
  'README.md',
  'CHANGELOG.md',
  ...files('docs', ['.md']),
  ...files('lua', ['.md']),
  ...files('examples', ['.md']),
]
const SOURCES = [
  ...files('src', ['.ts']),
  ...files('test', ['.ts']),
  ...files('bench', ['.ts']),
  ...files('examples', ['.ts', '.mjs']),
  ...files('lua', ['.lua']),
  ...files('scripts', ['.mjs', '.mts']),
  ...MARKDOWN,
]

/** A file's headings (backticks dropped) and the paragraphs it opens in bold (`**Upgrading.**`). */
const targets = new Map<string, string[]>()
function targetsOf(file: string): string[] {
  let found = targets.get(file)
  if (!found) {
    const text = withoutCode(read(file))
    found = [
      ...[...text.matchAll(/^#{1,6} (.+)$/gm)].map((match) => match[1]!.replace(/`/g, '').trim()),
      ...[...text.matchAll(/^\*\*([^*]+?)[.:]?\*\*/gm)].map((match) => match[1]!.trim()),
    ]
    targets.set(file, found)
  }
  return found
}

/** GitHub's anchor of a heading. */
const anchorOf = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-')

/** A prose pointer names a heading whole, or up to its colon or its parenthesis ("Admin API" for
 * "Admin API: limits at run time"). */
const names = (heading: string, named: string) =>
  heading === named || heading.startsWith(`${named}:`) || heading.startsWith(`${named} (`)

it('every Markdown link leads to a file, and its #anchor to a heading there', () => {
  const dead: string[] = []
  for (const doc of MARKDOWN) {
    for (const [, target] of withoutCode(read(doc)).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^(https?|mailto):/.test(target!)) continue
      const [file, anchor] = target!.split('#') as [string, string | undefined]
      const resolved = file ? path.normalize(path.join(path.dirname(doc), file)) : doc
      if (!existsSync(path.join(ROOT, resolved))) dead.push(`${doc}: ${target} (no such file)`)
      else if (anchor && resolved.endsWith('.md') && !targetsOf(resolved).some((h) => anchorOf(h) === anchor))
        dead.push(`${doc}: ${target} (no such heading in ${resolved})`)
    }
  }
  expect(dead).toEqual([])
})

it('every prose pointer (docs/<doc>.md, "<heading>") names a heading or a bold paragraph of that doc', () => {
  const dead: string[] = []
  for (const file of SOURCES) {
    // A pointer wrapped over comment lines reads as one line.
    const text = read(file).replace(/\n[ \t]*(?:\/\/|\*|--)?[ \t]*/g, ' ')
    for (const [, doc, named] of text.matchAll(/(docs\/[\w/-]+\.md),? "([^"]+)"/g)) {
      if (!existsSync(path.join(ROOT, doc!))) dead.push(`${file}: ${doc} (no such file)`)
      else if (!targetsOf(doc!).some((heading) => names(heading, named!)))
        dead.push(`${file}: ${doc}, "${named}" (no such heading)`)
    }
  }
  expect(dead).toEqual([])
})

it('every path of the tree named in code, tests, docs and benches exists', () => {
  const dead: string[] = []
  const named =
    /(?<![\w./-])((?:src|lua|test|docs|bench|scripts|examples|k6)\/[\w./-]*\.(?:ts|mts|mjs|md|lua|json|yaml|sh))\b/g
  for (const file of SOURCES) {
    for (const [, pointer] of read(file).matchAll(named)) {
      if (!existsSync(path.join(ROOT, pointer!))) dead.push(`${file}: ${pointer}`)
    }
  }
  expect(dead).toEqual([])
})
