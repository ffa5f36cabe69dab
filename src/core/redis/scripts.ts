import type { Cluster, Redis } from 'ioredis'
import { LUA_SOURCES, type LuaFile } from './lua-sources.js'

/** Preludes of each family of scripts, prepended in this order (they declare KEYS and helpers). */
const PRELUDES = {
  permits: ['lib/common.lua', 'lib/permits.lua'],
  rwlock: ['lib/common.lua', 'lib/rwlock.lua'],
} as const satisfies Record<string, readonly LuaFile[]>

/** Every script we register: command name -> file and prelude family. */
export const SCRIPTS = {
  tgPermitAcquire: { file: 'permit-acquire.lua', numberOfKeys: 6, lib: 'permits' },
  tgPermitRelease: { file: 'permit-release.lua', numberOfKeys: 6, lib: 'permits' },
  tgPermitRenew: { file: 'permit-renew.lua', numberOfKeys: 6, lib: 'permits' },
  tgPermitRecheck: { file: 'permit-recheck.lua', numberOfKeys: 6, lib: 'permits' },
  tgPermitInspect: { file: 'permit-inspect.lua', numberOfKeys: 6, lib: 'permits' },
  tgPermitSetLimit: { file: 'permit-set-limit.lua', numberOfKeys: 6, lib: 'permits' },
  tgRwAcquire: { file: 'rwlock-acquire.lua', numberOfKeys: 5, lib: 'rwlock' },
  tgRwRelease: { file: 'rwlock-release.lua', numberOfKeys: 5, lib: 'rwlock' },
  tgRwRenew: { file: 'rwlock-renew.lua', numberOfKeys: 5, lib: 'rwlock' },
  tgRwRecheck: { file: 'rwlock-recheck.lua', numberOfKeys: 5, lib: 'rwlock' },
  tgRwInspect: { file: 'rwlock-inspect.lua', numberOfKeys: 5, lib: 'rwlock' },
} as const satisfies Record<string, { file: LuaFile; numberOfKeys: number; lib: keyof typeof PRELUDES }>

export type ScriptName = keyof typeof SCRIPTS

let sources: Map<ScriptName, string> | undefined

/** Each script with its preludes, assembled once per process from the embedded lua/ sources
 * (lua-sources.ts, generated from lua/ by scripts/embed-lua.mjs: nothing is read from disk). */
export function scriptSource(name: ScriptName): string {
  if (!sources) {
    const read = (file: LuaFile) => LUA_SOURCES[file]
    sources = new Map()
    for (const [script, { file, lib }] of Object.entries(SCRIPTS) as [
      ScriptName,
      (typeof SCRIPTS)[ScriptName],
    ][]) {
      sources.set(script, [...PRELUDES[lib].map(read), read(file)].join('\n'))
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
