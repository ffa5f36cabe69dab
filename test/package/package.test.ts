// Packaging (issues 18, 41): what `npm pack` ships of both packages, used the way users use them. The
// library's tarball, tollgate (built by scripts/build.mjs, as `prepack` does, into a staged copy of the
// package), and the gateway's, tollgate-gateway (the same build, staged by scripts/stage-gateway.mjs,
// as its prepack does), are unpacked into fresh projects outside the repository, whose other
// dependencies are symlinks into the repository's node_modules (offline, no registry):
//   full/  both packages + the gateway's dependencies + the peers: a "type":"commonjs" consumer using
//          require(), an ESM consumer using import, a TypeScript `module: nodenext` consumer in a
//          CommonJS package (compiled with the repository's typescript, then run), the gateway's bin,
//          and an esbuild bundle run against the test Redis from a directory without node_modules
//          (no lua/ on disk, no package.json);
//   lib/   tollgate + ioredis only, as a library user installs it: every library entry point loads, and
//          no gateway code or dependency ships with it.
// @arethetypeswrong/cli checks every entry point of both tarballs under node10, node16 and bundler.
import { execFile, spawn } from 'node:child_process'
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { build } from 'esbuild'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { topology, uniquePrefix } from '../helpers/redis.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const REPO_MODULES = path.join(ROOT, 'node_modules')
const ATTW = path.join(REPO_MODULES, '@arethetypeswrong/cli/dist/index.js')
const TSC = path.join(REPO_MODULES, 'typescript/bin/tsc')
const BUILD = path.join(ROOT, 'scripts/build.mjs')
const STAGE_GATEWAY = path.join(ROOT, 'scripts/stage-gateway.mjs')
type Conditions = Record<'import' | 'require', { types: string; default: string }>
type Manifest = {
  name: string
  version: string
  bin?: Record<string, string>
  dependencies?: Record<string, string>
  exports: Record<string, Conditions | string>
}
const PKG = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Manifest
const GATEWAY_PKG = JSON.parse(
  readFileSync(path.join(ROOT, 'packages/gateway/package.json'), 'utf8'),
) as Manifest
/** The gateway's own dependencies besides ioredis (which the library may load, for a URL): a library
 * import must load none of them. */
const GATEWAY_DEPS = Object.keys(GATEWAY_PKG.dependencies ?? {}).filter((name) => name !== 'ioredis')
const GATEWAY_DEP_PATH = new RegExp(`[\\\\/]node_modules[\\\\/](${GATEWAY_DEPS.join('|')})[\\\\/]`)
/** What the adapters are for (installed as the repository has them) and @types/node for TypeScript. */
const PEERS = ['ioredis', 'express', 'koa', 'fastify', 'hono', '@types/node']
/** Every code entry point of a package's exports map: '.', './express', ... */
const entriesOf = (pkg: Manifest) =>
  Object.entries(pkg.exports).flatMap(([key, value]) =>
    typeof value === 'string' ? [] : [{ key, id: `${pkg.name}${key.slice(1)}`, ...value }],
  )
const ENTRIES = entriesOf(PKG)
/** tollgate-gateway's one entry point. */
const GATEWAY = entriesOf(GATEWAY_PKG)[0]!
/** The middleware entry points (each exports `semaphore`). */
const ADAPTERS = ENTRIES.filter(({ key }) => key !== '.').map(({ id }) => id)
/** The library entry points a user without the gateway's dependencies or any framework imports. */
const LIBRARY = ['tollgate', 'tollgate/express', 'tollgate/koa']

interface Run {
  stdout: string
  stderr: string
}

function run(file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    execFile(
      file,
      args,
      { cwd, env: { ...process.env, ...env }, timeout: 60_000, maxBuffer: 32 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error)
          reject(new Error(`${path.basename(file)} ${args.join(' ')} failed: ${error.message}\n${stderr}`))
        else resolve({ stdout, stderr })
      },
    )
  })
}

/** Run a consumer with node and parse the JSON report it prints as its last line. */
async function report(
  dir: string,
  args: string[],
  env?: NodeJS.ProcessEnv,
): Promise<Record<string, unknown>> {
  const { stdout } = await run(process.execPath, args, dir, env)
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as Record<string, unknown>
}

function write(file: string, text: string): void {
  mkdirSync(path.dirname(file), { recursive: true })
  writeFileSync(file, text)
}

/** A tsconfig.json in `project` that checks `file` strictly, every declaration file too (no
 * skipLibCheck), as a user's project on nodenext would. */
function strictProject(project: string, file: string, emit: { outDir: string } | { noEmit: true }): void {
  const compilerOptions = {
    module: 'nodenext',
    moduleResolution: 'nodenext',
    target: 'es2022',
    strict: true,
    skipLibCheck: false,
    types: ['node'],
    ...emit,
  }
  write(path.join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: [file] }))
}

function link(modules: string, name: string): void {
  mkdirSync(path.dirname(path.join(modules, name)), { recursive: true })
  symlinkSync(path.join(REPO_MODULES, name), path.join(modules, name), 'dir')
}

let tmp: string
/** The two tarballs, and the files in each. */
let tarball: string
let entries: string[]
let gatewayTarball: string
let gatewayEntries: string[]

/** Unpack a tarball (the library's unless told) into `modules`, as npm installs it. */
async function unpackInto(modules: string, from = tarball, name = 'tollgate'): Promise<void> {
  const dest = path.join(modules, name)
  mkdirSync(dest, { recursive: true })
  await run('tar', ['-xzf', from, '-C', dest, '--strip-components=1'], tmp)
}

/** `npm pack` in `dir` (scripts not run: the test staged it), and the tarball's path and files. */
async function pack(dir: string): Promise<{ file: string; files: string[] }> {
  const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', tmp], dir)
  const [packed] = JSON.parse(stdout.slice(stdout.lastIndexOf('\n[\n') + 1)) as { filename: string }[]
  const file = path.join(tmp, packed!.filename)
  const files = (await run('tar', ['-tzf', file], tmp)).stdout
    .split('\n')
    .filter(Boolean)
    .map((entry) => entry.replace(/^package\//, ''))
  return { file, files }
}

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'tollgate-package-'))
  // Pack what `npm pack` in the checkout packs, without touching the checkout's dist/ (other tests or a
  // running gateway may use it): a staged copy of the package, built by the same build script.
  const stage = path.join(tmp, 'stage')
  const { files } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { files: string[] }
  // (`files` also names what it leaves out of dist/: '!dist/gateway'.)
  const copied = files.filter((file) => file !== 'dist' && !file.startsWith('!'))
  for (const file of ['package.json', 'README.md', 'LICENSE', ...copied])
    cpSync(path.join(ROOT, file), path.join(stage, file), { recursive: true })
  await run(process.execPath, [BUILD, '--out-dir', path.join(stage, 'dist'), '--no-generate'], ROOT)
  ;({ file: tarball, files: entries } = await pack(stage))
  // The gateway's package: the same build, staged as its prepack stages it.
  const gatewayStage = path.join(tmp, 'stage-gateway')
  await run(
    process.execPath,
    [STAGE_GATEWAY, '--dist', path.join(stage, 'dist'), '--out', gatewayStage],
    ROOT,
  )
  ;({ file: gatewayTarball, files: gatewayEntries } = await pack(gatewayStage))

  const full = path.join(tmp, 'full/node_modules')
  await unpackInto(full)
  await unpackInto(full, gatewayTarball, 'tollgate-gateway')
  for (const name of [...GATEWAY_DEPS, ...PEERS]) link(full, name)
  const lib = path.join(tmp, 'lib/node_modules')
  await unpackInto(lib)
  link(lib, 'ioredis')
}, 180_000)

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true })
})

/** The files an entry point's conditions name. */
const filesOf = (list: typeof ENTRIES) =>
  list
    .flatMap((entry) => [
      entry.import.default,
      entry.import.types,
      entry.require.default,
      entry.require.types,
    ])
    .map((file) => file.replace(/^\.\//, ''))

describe('the tarballs', () => {
  it('ship both builds, the typings, LICENSE and the linked docs; no sources, maps or import.meta', () => {
    expect(entries).toEqual(
      expect.arrayContaining([
        'LICENSE',
        'README.md',
        'package.json',
        'dist/cjs/package.json',
        ...filesOf(ENTRIES),
      ]),
    )
    // The library ships no gateway code and no bin: they are tollgate-gateway's.
    expect(entries.filter((entry) => /^dist\/(cjs\/)?gateway\//.test(entry))).toEqual([])
    expect(PKG.bin).toBeUndefined()
    expect(gatewayEntries).toEqual(
      expect.arrayContaining([
        'LICENSE',
        'README.md',
        'package.json',
        'dist/gateway/main.js',
        'dist/cjs/package.json',
        ...filesOf([GATEWAY]),
      ]),
    )
    expect(GATEWAY_PKG.bin).toEqual({ 'tollgate-gateway': './dist/gateway/main.js' })
    expect(GATEWAY_PKG.version).toBe(PKG.version)
    for (const list of [entries, gatewayEntries])
      expect(list.filter((entry) => /\.map$|^src\/|^test\//.test(entry))).toEqual([])
    expect(readFileSync(path.join(tmp, 'full/node_modules/tollgate/LICENSE'), 'utf8')).toMatch(/^MIT License/)
    // The README's links to files (docs/*.md, CHANGELOG.md) must resolve in the package (and on the
    // npm page, via `repository`).
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8')
    const linked = [...readme.matchAll(/\]\(((?!https?:|#)[^)#\s]+)/g)].map((match) => match[1]!)
    expect(linked).toEqual(expect.arrayContaining(['docs/api.md', 'CHANGELOG.md']))
    expect(linked.filter((doc) => !entries.includes(doc))).toEqual([])
    // Compiled code never locates files by its own URL (bundles and CommonJS have none to offer).
    for (const name of ['tollgate', 'tollgate-gateway']) {
      const installed = path.join(tmp, 'full/node_modules', name, 'dist')
      const js = readdirSync(installed, { recursive: true })
        .map(String)
        .filter((file) => file.endsWith('.js'))
      const selfLocating = /\bimport\.meta\.(url|dirname|filename|resolve)\b/
      const offenders = js.filter((file) =>
        selfLocating.test(readFileSync(path.join(installed, file), 'utf8')),
      )
      expect(offenders, name).toEqual([])
    }
  })

  it('has a node10 stub (<subpath>/package.json) for every subpath, pointing at the CommonJS build', () => {
    for (const { key, require } of ENTRIES.filter((entry) => entry.key !== '.')) {
      const stub = JSON.parse(
        readFileSync(path.join(tmp, 'full/node_modules/tollgate', key, 'package.json'), 'utf8'),
      ) as Record<string, string>
      expect(stub, key).toEqual({ main: `.${require.default}`, types: `.${require.types}` })
    }
  })

  it('have no type problem for node10, node16 (CJS and ESM) and bundler on any entry point (attw)', async () => {
    for (const [file, pkg] of [
      [tarball, PKG],
      [gatewayTarball, GATEWAY_PKG],
    ] as const) {
      const { stdout } = await run(
        process.execPath,
        [ATTW, file, '--format', 'json', '--no-definitely-typed', '--profile', 'strict'],
        tmp,
      )
      const { analysis } = JSON.parse(stdout) as {
        analysis: {
          problems: unknown[]
          entrypoints: Record<string, { resolutions: Record<string, { resolution?: { fileName: string } }> }>
        }
      }
      expect(analysis.problems, pkg.name).toEqual([])
      expect(Object.keys(analysis.entrypoints).sort()).toEqual(Object.keys(pkg.exports).sort())
      for (const entry of entriesOf(pkg)) {
        const { resolutions } = analysis.entrypoints[entry.key]!
        const files = Object.fromEntries(
          Object.entries(resolutions).map(([kind, { resolution }]) => [kind, resolution?.fileName]),
        )
        const at = (file: string) => `/node_modules/${pkg.name}/${file.slice(2)}`
        expect(files, entry.id).toEqual({
          node10: at(entry.require.types),
          'node16-cjs': at(entry.require.types),
          'node16-esm': at(entry.import.types),
          bundler: at(entry.import.types),
        })
      }
    }
  })
})

/** What every JavaScript consumer does with the library (memory store, mutex, semaphore, errors) and
 * with each adapter (`mods` maps an entry id to its module). */
const EXERCISE = `
  const tollgate = mods.tollgate
  const store = tollgate.createMemoryStore()
  const mutex = tollgate.createMutex(store, 'm')
  const lease = await mutex.acquire({ timeoutMs: 1000 })
  assert.equal(await mutex.tryAcquire(), undefined)
  await lease.release()
  const again = await mutex.tryAcquire()
  assert.ok(again)
  await again.release()
  const sem = tollgate.createSemaphore(store, 's', { permits: 2 })
  assert.equal(await sem.withLease(async () => 42), 42)
  assert.throws(() => tollgate.createSemaphore(store, 's', { permits: 0 }), tollgate.ConfigError)
  for (const [id, mod] of Object.entries(mods)) {
    if (id !== 'tollgate') assert.equal(typeof mod.semaphore(2), 'function', id)
  }
`

const GATEWAY_ID = GATEWAY.id

describe('consumers of the installed tarball', () => {
  it('require() works from a "type": "commonjs" package, every entry point from dist/cjs', async () => {
    const dir = path.join(tmp, 'full/cjs')
    write(path.join(dir, 'package.json'), JSON.stringify({ name: 'cjs-consumer', type: 'commonjs' }))
    write(
      path.join(dir, 'index.js'),
      `const assert = require('node:assert/strict')
const GATEWAY_DEP = ${GATEWAY_DEP_PATH.toString()}
const loaded = () => Object.keys(require.cache).filter((file) => GATEWAY_DEP.test(file))
const mods = Object.fromEntries(${JSON.stringify(['tollgate', ...ADAPTERS])}.map((id) => [id, require(id)]))
async function main() {
  ${EXERCISE}
  const library = loaded()
  assert.equal(typeof require('${GATEWAY_ID}').startFromArgs, 'function')
  console.log(JSON.stringify({
    resolved: ${JSON.stringify(ENTRIES.map(({ id }) => id))}.map((id) => require.resolve(id)),
    library,
    gateway: loaded().length,
  }))
}
main().catch((error) => { console.error(error); process.exit(1) })
`,
    )
    const result = await report(dir, ['index.js'])
    const installed = path.join(tmp, 'full/node_modules/tollgate')
    expect(result.resolved).toEqual(ENTRIES.map((entry) => path.join(installed, entry.require.default)))
    expect(result.library).toEqual([]) // no library or adapter entry loaded a gateway dependency
    expect(result.gateway).toBeGreaterThan(0) // ...which require.cache would have shown
  })

  it('import works from an ESM package, every entry point from dist/, and loads no gateway dependency', async () => {
    const dir = path.join(tmp, 'full/esm')
    write(path.join(dir, 'package.json'), JSON.stringify({ name: 'esm-consumer', type: 'module' }))
    // Records every URL the ESM loader resolves (module.register hooks run off-thread in Node 20).
    write(
      path.join(dir, 'hooks.js'),
      `import { appendFileSync } from 'node:fs'
let log
export function initialize(data) { log = data.log }
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context)
  appendFileSync(log, result.url + '\\n')
  return result
}
`,
    )
    write(
      path.join(dir, 'register.js'),
      `import { register } from 'node:module'
register('./hooks.js', import.meta.url, { data: { log: process.env.RESOLVE_LOG } })
`,
    )
    write(
      path.join(dir, 'index.js'),
      `import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
const GATEWAY_DEP = ${GATEWAY_DEP_PATH.toString()}
const loaded = () => readFileSync(process.env.RESOLVE_LOG, 'utf8').split('\\n').filter((url) => GATEWAY_DEP.test(url))
const ids = ${JSON.stringify(['tollgate', ...ADAPTERS])}
const mods = Object.fromEntries(await Promise.all(ids.map(async (id) => [id, await import(id)])))
${EXERCISE}
const library = loaded()
assert.equal(typeof (await import('${GATEWAY_ID}')).startFromArgs, 'function')
console.log(JSON.stringify({
  resolved: ${JSON.stringify(ENTRIES.map(({ id }) => id))}.map((id) => import.meta.resolve(id)),
  library,
  gateway: loaded().length,
}))
`,
    )
    const log = path.join(dir, 'resolved.log')
    write(log, '')
    const result = await report(dir, ['--import', './register.js', 'index.js'], { RESOLVE_LOG: log })
    const installed = path.join(tmp, 'full/node_modules/tollgate')
    expect(result.resolved).toEqual(
      ENTRIES.map((entry) => pathToFileURL(path.join(installed, entry.import.default)).href),
    )
    expect(result.library).toEqual([])
    expect(result.gateway).toBeGreaterThan(0)
  })

  it('TypeScript `module: nodenext` in a CommonJS package type-checks and runs', async () => {
    const dir = path.join(tmp, 'full/ts')
    write(path.join(dir, 'package.json'), JSON.stringify({ name: 'ts-consumer', type: 'commonjs' }))
    write(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          strict: true,
          skipLibCheck: true,
          types: ['node'],
          rootDir: '.',
          outDir: '.',
        },
        files: ['index.ts'],
      }),
    )
    write(
      path.join(dir, 'index.ts'),
      `import { ConfigError, createMemoryStore, createMutex, createSemaphore, type Lease, TollgateError } from 'tollgate'
import { semaphore as expressSemaphore, type ExpressMiddleware } from 'tollgate/express'
import { semaphore as koaSemaphore, type KoaMiddleware } from 'tollgate/koa'
import { startFromArgs, type GatewayConfig } from 'tollgate-gateway'

async function main(): Promise<void> {
  const store = createMemoryStore()
  const mutex = createMutex(store, 'ts')
  const lease: Lease = await mutex.acquire({ timeoutMs: 1000 })
  const token: number = lease.fencingToken
  await lease.release()
  const sem = createSemaphore(store, 's', { permits: 1 })
  const answer: number = await sem.withLease(async () => 42)
  // @ts-expect-error permits is a number: the typings are real, not any
  const wrong = () => createSemaphore(store, 's', { permits: 'one' })
  let caught: unknown
  try {
    wrong()
  } catch (error) {
    caught = error
  }
  const mw: ExpressMiddleware = expressSemaphore(2)
  const kmw: KoaMiddleware = koaSemaphore(2)
  const config: GatewayConfig | undefined = undefined
  console.log(JSON.stringify({
    answer,
    token: typeof token,
    configError: caught instanceof ConfigError && caught instanceof TollgateError,
    functions: [typeof mw, typeof kmw, typeof startFromArgs],
    config: config ?? null,
    entry: require.resolve('tollgate'),
  }))
}
main().catch((error: unknown) => {
  console.error(error)
  process.exit(1)
})
`,
    )
    await run(process.execPath, [TSC, '-p', dir], dir)
    const result = await report(dir, ['index.js'])
    expect(result).toEqual({
      answer: 42,
      token: 'number',
      configError: true,
      functions: ['function', 'function', 'function'],
      config: null,
      entry: path.join(tmp, 'full/node_modules/tollgate/dist/cjs/index.js'),
    })
  })

  it('prints its version from the bin', async () => {
    const bin = path.join(tmp, 'full/node_modules/tollgate-gateway/dist/gateway/main.js')
    const { stdout } = await run(process.execPath, [bin, '--version'], tmp)
    expect(stdout.trim()).toBe(PKG.version)
  })

  it('prints the example config from the bin, and the gateway starts on it (the first run the README gives)', async () => {
    const bin = path.join(tmp, 'full/node_modules/tollgate-gateway/dist/gateway/main.js')
    const { stdout } = await run(process.execPath, [bin, '--example-config'], tmp)
    expect(stdout).toBe(readFileSync(path.join(ROOT, 'examples/gateway.yaml'), 'utf8').trimEnd() + '\n')
    const file = path.join(tmp, 'first-run/tollgate.yaml')
    write(file, stdout)
    // --help exits after reading flags; a config check needs a start: start it and stop it.
    const child = spawn(process.execPath, [bin, '--config', file, '--port', '0', '--admin-port', '0'], {
      cwd: path.dirname(file),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    try {
      let out = ''
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()))
      await new Promise<void>((resolve, reject) => {
        child.once('exit', (code) => reject(new Error(`exited ${code} before listening`)))
        child.stdout.on('data', () => {
          if (/tollgate listening on http:\/\/127\.0\.0\.1:\d+/.test(out)) resolve()
        })
      })
    } finally {
      child.kill('SIGKILL')
    }
  }, 30_000)

  it('node-redis and no ioredis: the primitives run on a node-redis client and cluster, and type-check', async () => {
    const project = path.join(tmp, 'node-redis')
    const modules = path.join(project, 'node_modules')
    await unpackInto(modules)
    for (const name of [
      'redis',
      '@redis/client',
      '@redis/bloom',
      '@redis/json',
      '@redis/search',
      '@redis/time-series',
      'cluster-key-slot',
      '@types/node',
    ])
      link(modules, name)
    write(path.join(project, 'package.json'), JSON.stringify({ name: 'node-redis-app', type: 'module' }))
    write(
      path.join(project, 'app.ts'),
      `import { createClient, createCluster } from 'redis'
import { createMutex, createRedisStore, createSemaphore } from 'tollgate'
const client = createClient({ url: process.env.REDIS_URL })
await client.connect()
const store = createRedisStore(client, { prefix: process.env.PREFIX })
const sem = createSemaphore(store, 'nr', { permits: 1 })
const first = await sem.acquire()
const waiting = sem.acquire({ timeoutMs: 3000 })
await first.release()
await (await waiting).release()
const cluster = createCluster({ rootNodes: [{ url: process.env.CLUSTER_URL }] })
await cluster.connect()
const clusterStore = createRedisStore(cluster, { prefix: process.env.PREFIX })
const lease = await createMutex(clusterStore, 'nr-mutex').acquire({ timeoutMs: 2000 })
await lease.release()
await Promise.all([store.close(), clusterStore.close()])
await Promise.all([client.close(), cluster.close()])
console.log(JSON.stringify({ ok: true, fence: lease.fencingToken > 0 }))
`,
    )
    strictProject(project, 'app.ts', { outDir: '.' })
    expect(existsSync(path.join(modules, 'ioredis'))).toBe(false)
    // Type-checked as a user's project would be (the client types of node-redis are accepted), then run.
    await run(process.execPath, [TSC, '-p', project], project)
    const { standalone, cluster } = topology()
    const env = {
      REDIS_URL: `redis://${standalone.host}:${standalone.port}`,
      CLUSTER_URL: `redis://${cluster[0]!.host}:${cluster[0]!.port}`,
      PREFIX: uniquePrefix().slice(0, -1),
    }
    expect(await report(project, ['app.js'], env)).toEqual({ ok: true, fence: true })
  })

  it('ioredis 6 as the installed peer: the primitives run on it', async () => {
    const project = path.join(tmp, 'ioredis6')
    const modules = path.join(project, 'node_modules')
    await unpackInto(modules)
    symlinkSync(path.join(REPO_MODULES, 'ioredis6'), path.join(modules, 'ioredis'), 'dir')
    write(
      path.join(project, 'app.mjs'),
      `import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { Redis } from 'ioredis'
import { createRedisStore, createSemaphore, createMutex } from 'tollgate'
const version = createRequire(import.meta.url)('ioredis/package.json').version
assert.match(version, /^6\\./)
const redis = new Redis({ host: process.env.REDIS_HOST, port: Number(process.env.REDIS_PORT) })
const store = createRedisStore(redis, { prefix: process.env.PREFIX })
const sem = createSemaphore(store, 'six', { permits: 1 })
const first = await sem.acquire()
const waiting = sem.acquire({ timeoutMs: 3000 })
await first.release()
await (await waiting).release()
await (await createMutex(store, 'six-mutex').acquire({ timeoutMs: 2000 })).release()
await store.close()
await redis.quit()
console.log(JSON.stringify({ ok: true, version }))
`,
    )
    const { host, port } = topology().standalone
    const env = { REDIS_HOST: host, REDIS_PORT: String(port), PREFIX: uniquePrefix().slice(0, -1) }
    expect(await report(project, ['app.mjs'], env)).toMatchObject({
      ok: true,
      version: expect.stringMatching(/^6\./),
    })
    // The peer range admits it: npm would not refuse this install (ERESOLVE before).
    const { peerDependencies } = JSON.parse(
      readFileSync(path.join(modules, 'tollgate/package.json'), 'utf8'),
    ) as {
      peerDependencies: Record<string, string>
    }
    expect(peerDependencies.ioredis).toBe('^5.11.1 || ^6.0.0')
  })

  it('a library install (tollgate and ioredis) loads tollgate, /express and /koa, and has no gateway', async () => {
    const modules = path.join(tmp, 'lib/node_modules')
    expect(readdirSync(modules).sort()).toEqual(['ioredis', 'tollgate'])
    const cjs = path.join(tmp, 'lib/cjs')
    write(path.join(cjs, 'package.json'), JSON.stringify({ type: 'commonjs' }))
    write(
      path.join(cjs, 'index.js'),
      `const assert = require('node:assert/strict')
const mods = Object.fromEntries(${JSON.stringify(LIBRARY)}.map((id) => [id, require(id)]))
async function main() {
  ${EXERCISE}
  let missing
  try { require('${GATEWAY_ID}') } catch (error) { missing = error.code + ' ' + error.message.split('\\n')[0] }
  console.log(JSON.stringify({ ok: true, missing }))
}
main().catch((error) => { console.error(error); process.exit(1) })
`,
    )
    const esm = path.join(tmp, 'lib/esm')
    write(path.join(esm, 'package.json'), JSON.stringify({ type: 'module' }))
    write(
      path.join(esm, 'index.js'),
      `import assert from 'node:assert/strict'
const ids = ${JSON.stringify(LIBRARY)}
const mods = Object.fromEntries(await Promise.all(ids.map(async (id) => [id, await import(id)])))
${EXERCISE}
let missing
try { await import('${GATEWAY_ID}') } catch (error) { missing = error.code + ' ' + error.message.split('\\n')[0] }
console.log(JSON.stringify({ ok: true, missing }))
`,
    )
    // The gateway is another package: not installed here, so not found (by either resolver).
    const missing = expect.stringMatching(/MODULE_NOT_FOUND .*'tollgate-gateway'/)
    expect(await report(cjs, ['index.js'])).toEqual({ ok: true, missing })
    expect(await report(esm, ['index.js'])).toEqual({ ok: true, missing })
    // Nothing of it came with the library: no code, no bin.
    const installed = path.join(modules, 'tollgate')
    expect(existsSync(path.join(installed, 'dist/gateway'))).toBe(false)
    expect(existsSync(path.join(installed, 'dist/cjs/gateway'))).toBe(false)
    expect(JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8')).bin).toBeUndefined()
  })

  it('with no Redis client installed, the library loads, runs the memory store and type-checks; a URL store says to install ioredis', async () => {
    const project = path.join(tmp, 'no-client')
    const modules = path.join(project, 'node_modules')
    await unpackInto(modules)
    link(modules, '@types/node')
    write(path.join(project, 'package.json'), JSON.stringify({ name: 'no-client', type: 'module' }))
    // The memory store, the adapters, and a URL store whose calls say what to install.
    const program = (load: string) => `${load}
const store = createMemoryStore()
const lease = await createMutex(store, 'm').acquire({ timeoutMs: 1000 })
await lease.release()
const middleware = typeof semaphore(2)
const viaUrl = createRedisStore('redis://127.0.0.1:9')
let failed = ''
try {
  await createMutex(viaUrl, 'm').tryAcquire()
} catch (error) {
  failed = error.code + ': ' + error.message + ' / ' + error.cause?.message
}
await viaUrl.close()
console.log(JSON.stringify({ fence: typeof lease.fencingToken, middleware, failed }))
`
    write(
      path.join(project, 'esm.mjs'),
      program(
        "import { createMemoryStore, createMutex, createRedisStore } from 'tollgate'\nimport { semaphore } from 'tollgate/express'",
      ),
    )
    write(
      path.join(project, 'cjs.cjs'),
      `const { createMemoryStore, createMutex, createRedisStore } = require('tollgate')
const { semaphore } = require('tollgate/express')
;(async () => {
${program('')}
})().catch((error) => { console.error(error); process.exit(1) })
`,
    )
    const expected = {
      fence: 'number',
      middleware: 'function',
      failed:
        'ERR_TOLLGATE_STORE_UNAVAILABLE: Could not acquire "m": createRedisStore() connects a redis:// URL with ioredis, which is not installed: run "npm install ioredis", or pass a client you made (ioredis or node-redis). / createRedisStore() connects a redis:// URL with ioredis, which is not installed: run "npm install ioredis", or pass a client you made (ioredis or node-redis).',
    }
    expect(await report(project, ['esm.mjs'])).toEqual(expected)
    expect(await report(project, ['cjs.cjs'])).toEqual(expected)
    // The typings need no ioredis either, even with every declaration file checked.
    strictProject(project, 'index.ts', { noEmit: true })
    write(
      path.join(project, 'index.ts'),
      `import { createMemoryStore, createMutex, createRedisStore, type RedisClient } from 'tollgate'
import { semaphore } from 'tollgate/express'
const client: RedisClient | undefined = undefined
export const made = [createMutex(createMemoryStore(), 'm'), semaphore(2), client ?? createRedisStore('redis://x')]
`,
    )
    await run(process.execPath, [TSC, '-p', project], project)
  })

  it("the gateway's bin where its dependencies are not installed names them in one install command", async () => {
    // A hand-assembled node_modules (a copied directory, a bundler's externals): the package alone.
    const bare = path.join(tmp, 'bare')
    const modules = path.join(bare, 'node_modules')
    await unpackInto(modules, gatewayTarball, 'tollgate-gateway')
    const bin = path.join(modules, 'tollgate-gateway/dist/gateway/main.js')
    const env = { npm_config_user_agent: '' } // as run by node, not by a package manager
    const args = [bin, '--upstream', 'http://127.0.0.1:9', '--redis', 'redis://127.0.0.1:9']
    const failed = (cwd: string) =>
      run(process.execPath, args, cwd, env).then(
        () => 'exited 0',
        (error: Error) => error.message,
      )
    expect(await failed(bare)).toContain(
      'tollgate: the gateway needs ioredis, pino, prom-client, proxy-addr, undici, yaml and zod, which are dependencies of tollgate-gateway but not installed here.\n' +
        'tollgate: install them: npm install ioredis pino prom-client proxy-addr undici yaml zod\n',
    )
    // One of them missing: that one.
    for (const name of GATEWAY_DEPS) link(modules, name)
    expect(await failed(bare)).toContain(
      'tollgate: the gateway needs ioredis, which is a dependency of tollgate-gateway but not installed here.\n' +
        'tollgate: install it: npm install ioredis\n',
    )
  })
})

describe('the README and the docs', () => {
  it('run every complete program in them with plain Node (no TypeScript, no transpiler) against the tarball, printing no warning', async () => {
    const docs = ['README.md', ...readdirSync(path.join(ROOT, 'docs')).map((file) => `docs/${file}`)]
    const programs = docs
      .filter((doc) => doc.endsWith('.md'))
      .flatMap((doc) =>
        [
          ...readFileSync(path.join(ROOT, doc), 'utf8').matchAll(
            /```js\n(\/\/ A complete program[^\n]*\n[\s\S]*?)```/g,
          ),
        ].map((m) => ({ doc, program: m[1] as string })),
      )
    expect(programs.filter(({ doc }) => doc === 'README.md').length).toBeGreaterThanOrEqual(2)
    for (const [i, { doc, program }] of programs.entries()) {
      const file = path.join(tmp, `full/program-${i}.mjs`)
      write(file, program)
      const { stdout, stderr } = await run(process.execPath, [file], path.dirname(file))
      expect(stdout, `${doc}:\n${program}`).toMatch(/\S/)
      // As pasted, a sample runs without a warning (e.g. TOLLGATE_UNNAMED_POLICY) or a stack trace.
      expect(stderr, `${doc}:\n${program}`).toBe('')
    }
  })
})

describe('an esbuild bundle', () => {
  it('minified, runs semaphores, a mutex and a read/write lock on Redis with nothing on disk but the bundle', async () => {
    const source = path.join(tmp, 'full/bundle/app.mjs')
    write(
      source,
      `import assert from 'node:assert/strict'
import { Redis } from 'ioredis'
import { createMutex, createReadWriteLock, createRedisStore, createSemaphore } from 'tollgate'

async function main() {
  const redis = new Redis({ host: process.env.REDIS_HOST, port: Number(process.env.REDIS_PORT) })
  const store = createRedisStore(redis, { prefix: process.env.PREFIX })
  const sem = createSemaphore(store, 'bundle', { permits: 1 })
  const lease = await sem.acquire({ timeoutMs: 2000 })
  assert.equal(await sem.tryAcquire(), undefined)
  await lease.release()
  assert.equal(await sem.withLease(async () => 'granted'), 'granted')
  const mutex = createMutex(store, 'bundle-mutex')
  await (await mutex.acquire({ timeoutMs: 2000 })).release()
  const rw = createReadWriteLock(store, 'bundle-rw')
  await (await rw.read.acquire({ timeoutMs: 2000 })).release()
  await (await rw.write.acquire({ timeoutMs: 2000 })).release()
  await store.close()
  await redis.quit()
  console.log(JSON.stringify({ ok: true }))
}
main().catch((error) => { console.error(error); process.exit(1) })
`,
    )
    const outfile = path.join(tmp, 'bundle-out/app.cjs')
    const result = await build({
      entryPoints: [source],
      bundle: true, // tollgate and ioredis both inside: no node_modules next to the output
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      // Class names renamed: ioredis's ReplyError is no longer named so (the store must still load
      // its Lua on a fresh server, which it learns from an error reply).
      minify: true,
      outfile,
      logLevel: 'silent',
    })
    expect(result.errors).toEqual([])
    expect(result.warnings).toEqual([]) // e.g. no "import.meta" emptied in a CommonJS output
    expect(readdirSync(path.dirname(outfile))).toEqual(['app.cjs'])
    const { host, port } = topology().standalone
    const env = { REDIS_HOST: host, REDIS_PORT: String(port), PREFIX: uniquePrefix().slice(0, -1) }
    expect(await report(path.dirname(outfile), ['app.cjs'], env)).toEqual({ ok: true })
  })
})
