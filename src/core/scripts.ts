import { readFileSync } from 'node:fs'
import type { Cluster, Redis } from 'ioredis'

const LUA_DIR = new URL('../../lua/', import.meta.url)

/** Every script we register: command name -> file. Files under lua/ that start with `permit-` get the
 * shared prelude lua/lib/permits.lua (it declares their KEYS and helpers). */
export const SCRIPTS = {
  tgPermitAcquire: { file: 'permit-acquire.lua', numberOfKeys: 5 },
  tgPermitRelease: { file: 'permit-release.lua', numberOfKeys: 5 },
  tgPermitRenew: { file: 'permit-renew.lua', numberOfKeys: 5 },
  tgPermitRecheck: { file: 'permit-recheck.lua', numberOfKeys: 5 },
  tgPermitInspect: { file: 'permit-inspect.lua', numberOfKeys: 5 },
  tgPermitSetLimit: { file: 'permit-set-limit.lua', numberOfKeys: 5 },
} as const

export type ScriptName = keyof typeof SCRIPTS

let sources: Map<ScriptName, string> | undefined

/** Read lua/ once per process (shipped in package.json#files). */
export function scriptSource(name: ScriptName): string {
  if (!sources) {
    const prelude = readFileSync(new URL('lib/permits.lua', LUA_DIR), 'utf8')
    sources = new Map()
    for (const [script, { file }] of Object.entries(SCRIPTS) as [ScriptName, { file: string }][]) {
      const body = readFileSync(new URL(file, LUA_DIR), 'utf8')
      sources.set(script, file.startsWith('permit-') ? `${prelude}\n${body}` : body)
    }
  }
  return sources.get(name) as string
}

/** Register our scripts on a client once; a shared client keeps the first registration. ioredis then
 * sends EVALSHA and falls back to EVAL on NOSCRIPT, per connection and per Cluster node. */
export function registerScripts(client: Redis | Cluster): void {
  for (const [name, { numberOfKeys }] of Object.entries(SCRIPTS) as [
    ScriptName,
    { numberOfKeys: number },
  ][]) {
    if (name in client) continue
    client.defineCommand(name, { lua: scriptSource(name), numberOfKeys })
  }
}

type Arg = string | number
/** Calls of the registered scripts (KEYS first, then ARGV), with their raw replies. */
export type ScriptClient = Record<ScriptName, (...args: Arg[]) => Promise<unknown>>
