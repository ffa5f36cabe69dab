// The generated sources are committed, so running from src/ (tsx, vitest) needs no build step: they
// must match what they are generated from. Fix a failure with `npm run build` (or the script named).
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { functionLibraries, functionName, scriptSource } from '../../src/core/redis/scripts.js'
import { VERSION } from '../../src/gateway/version.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const exec = promisify(execFile)

describe('generated sources', () => {
  it.each(['scripts/embed-lua.mjs', 'scripts/embed-version.mjs', 'scripts/embed-dashboard.mjs'])(
    '%s --check: up to date',
    async (script) => {
      await expect(exec(process.execPath, [script, '--check'], { cwd: ROOT })).resolves.toBeDefined()
    },
  )

  it('each script is its preludes and its own file from lua/, byte for byte, in both forms', () => {
    const lua = (file: string) => readFileSync(new URL(`lua/${file}`, `file://${ROOT}`), 'utf8')
    const body = (name: string, file: string) =>
      `local function ${name}(KEYS, ARGV)\nbegin(KEYS, ARGV)\n${lua(file)}\nend`
    // The EVAL form: a script per family, the call's last argument choosing the script.
    // The permit set's preludes, by concept, in this order (lua/README.md).
    const PERMIT_PRELUDES = [
      'lib/common.lua',
      'lib/permits.lua',
      'lib/permit-fence.lua',
      'lib/permit-holds.lua',
      'lib/permit-queue.lua',
    ]
      .map(lua)
      .join('\n')
    const branch = (name: string, file: string) =>
      `if tollgate_script == '${name}' then\n${body(name, file)}\nreturn ${name}(KEYS, ARGV)\nend`
    const permitsScript = scriptSource('tgPermitAcquire')
    expect(
      permitsScript.startsWith(
        `${PERMIT_PRELUDES}\n${lua('lib/fair.lua')}\nlocal tollgate_script = table.remove(ARGV)\n`,
      ),
    ).toBe(true)
    expect(permitsScript).toContain(branch('permit_acquire', 'permit-acquire.lua'))
    expect(scriptSource('tgPermitRelease')).toBe(permitsScript)
    expect(scriptSource('tgRwRelease')).toContain(branch('rwlock_release', 'rwlock-release.lua'))
    expect(
      scriptSource('tgRwRelease').startsWith(`${lua('lib/common.lua')}\n${lua('lib/rwlock.lua')}\n`),
    ).toBe(true)
    const [permits, rwlock] = functionLibraries()
    expect(permits?.code).toContain(body('permit_acquire', 'permit-acquire.lua'))
    expect(
      permits?.code.startsWith(`#!lua name=${permits.name}\n${PERMIT_PRELUDES}\n${lua('lib/fair.lua')}\n`),
    ).toBe(true)
    expect(rwlock?.code).toContain(body('rwlock_release', 'rwlock-release.lua'))
    expect(permits?.code).toContain(
      `redis.register_function('${functionName('tgPermitAcquire')}', permit_acquire)`,
    )
  })

  it("the embedded version is package.json's", () => {
    const pkg = JSON.parse(readFileSync(new URL('package.json', `file://${ROOT}`), 'utf8')) as {
      version: string
    }
    expect(VERSION).toBe(pkg.version)
  })
})
