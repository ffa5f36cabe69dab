// What the scripts/embed-*.mjs share: writing a generated module (or, with --check, failing when the
// committed one is stale), and the template literal they embed text in.
/* global process, console */
import { readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

/** A template literal whose value is exactly `text` (prettier leaves template literals alone). */
export function templateLiteral(text) {
  return '`' + text.replaceAll('\\', '\\\\').replaceAll('`', '\\`').replaceAll('${', '\\${') + '`'
}

/** The command line of an embed script: write `file` with `wanted` (only when it differs), or with
 * --check exit 1 when the file is not `wanted`, naming `script` as the fix. */
export function writeGenerated(file, wanted, script) {
  let current
  try {
    current = readFileSync(file, 'utf8')
  } catch {
    current = undefined
  }
  if (process.argv.includes('--check')) {
    if (current !== wanted) {
      console.error(`${path.relative(ROOT, file)} is stale: run node ${script} (npm run build does)`)
      process.exit(1)
    }
    return
  }
  if (current !== wanted) writeFileSync(file, wanted)
}

/** Whether the module `url` (import.meta.url) is the script node runs, not an import. */
export function isMain(url) {
  return Boolean(process.argv[1]) && path.resolve(process.argv[1]) === fileURLToPath(url)
}
