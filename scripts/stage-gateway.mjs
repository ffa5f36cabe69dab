#!/usr/bin/env node
// Stages the tollgate-gateway package (packages/gateway) for `npm pack` and `npm publish` (its
// prepack): the compiled tree, library and gateway both (the gateway's code imports the library's by
// relative path, and pnpm lets a package see only its own dependencies), and the LICENSE. The package
// tollgate ships the same tree without dist/gateway (its `files`).
//   node scripts/stage-gateway.mjs [--build] [--dist <dir>] [--out <dir>]
//     --build       run scripts/build.mjs first (into dist/)
//     --dist <dir>  the compiled tree to copy (default: dist/)
//     --out <dir>   where the package is staged (default: packages/gateway/): its package.json and
//                   README.md are copied there too when it is not packages/gateway itself
/* global process */
import { spawnSync } from 'node:child_process'
import { cpSync, existsSync, rmSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const PACKAGE = path.join(ROOT, 'packages/gateway')
const args = process.argv.slice(2)
const option = (name, fallback) => {
  const at = args.indexOf(name)
  if (at === -1) return fallback
  if (!args[at + 1]) throw new Error(`${name} needs a directory`)
  return path.resolve(args[at + 1])
}
const dist = option('--dist', path.join(ROOT, 'dist'))
const out = option('--out', PACKAGE)

if (args.includes('--build')) {
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs')], { stdio: 'inherit' })
  if (built.status !== 0) process.exit(built.status ?? 1)
}
if (!existsSync(path.join(dist, 'gateway/main.js')))
  throw new Error(`${dist} has no gateway/main.js: run npm run build first (or pass --build)`)
rmSync(path.join(out, 'dist'), { recursive: true, force: true })
cpSync(dist, path.join(out, 'dist'), { recursive: true })
cpSync(path.join(ROOT, 'LICENSE'), path.join(out, 'LICENSE'))
if (out !== PACKAGE)
  for (const file of ['package.json', 'README.md']) cpSync(path.join(PACKAGE, file), path.join(out, file))
