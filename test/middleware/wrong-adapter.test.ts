// An adapter mounted in the wrong framework (issue 37, 6.1): every mix-up the call shapes allow
// (Express (req, res, next), Koa (ctx, next), Hono (c, next), a Fastify plugin or hook) fails through
// the host framework's error path with ERR_TOLLGATE_WRONG_ADAPTER and the import to use, on real apps
// over real HTTP; nothing is admitted and the handler never runs. The mix-ups that crashed the process
// are run in a child process, whose exit is the evidence. What must not change: each adapter in its
// own framework still admits a request, sets its headers and reaches the handler.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { createAdaptorServer } from '@hono/node-server'
import express5 from 'express'
import express4 from 'express4'
import Fastify, { type FastifyInstance } from 'fastify'
import { Hono } from 'hono'
import Koa3 from 'koa'
import Koa2 from 'koa2'
import { afterEach, describe, expect, it } from 'vitest'
import { createMemoryStore } from '../../src/index.js'
import * as tgExpress from '../../src/middleware/express.js'
import * as tgFastify from '../../src/middleware/fastify.js'
import * as tgHono from '../../src/middleware/hono.js'
import * as tgKoa from '../../src/middleware/koa.js'

type Adapter = 'express' | 'koa' | 'fastify' | 'hono'
type Host = 'express' | 'express4' | 'koa' | 'koa2' | 'fastify' | 'fastify-hook' | 'hono'
const ADAPTERS: readonly Adapter[] = ['express', 'koa', 'fastify', 'hono']
const HOSTS: readonly Host[] = ['express', 'express4', 'koa', 'koa2', 'fastify', 'fastify-hook', 'hono']
const MODULES = { express: tgExpress, koa: tgKoa, fastify: tgFastify, hono: tgHono }
/** The framework each host is, and how the right adapter is mounted there. */
const FAMILY: Record<Host, { name: string; module: Adapter; mount: string }> = {
  express: { name: 'an Express app', module: 'express', mount: 'app.use' },
  express4: { name: 'an Express app', module: 'express', mount: 'app.use' },
  koa: { name: 'a Koa app', module: 'koa', mount: 'app.use' },
  koa2: { name: 'a Koa app', module: 'koa', mount: 'app.use' },
  fastify: { name: 'a Fastify app', module: 'fastify', mount: 'await app.register' },
  'fastify-hook': { name: 'a Fastify app', module: 'fastify', mount: 'await app.register' },
  hono: { name: 'a Hono app', module: 'hono', mount: 'app.use' },
}

interface Mounted {
  url: string
  /** Errors the host framework's error handler (Koa: its 'error' event) received. */
  errors: Error[]
  /** Requests that reached the route handler. */
  handled: () => number
}

const closers: (() => Promise<unknown>)[] = []
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()))
})

async function listening(server: http.Server): Promise<string> {
  closers.push(async () => {
    server.closeAllConnections()
    server.close()
    await once(server, 'close').catch(() => {})
  })
  if (!server.listening) {
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
  }
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** A real app of `host` with `middleware` mounted the way that framework mounts its middleware. */
async function mount(host: Host, middleware: unknown): Promise<Mounted> {
  const errors: Error[] = []
  let handled = 0
  const use = middleware as never
  if (host === 'express' || host === 'express4') {
    const app = host === 'express' ? express5() : express4()
    app.use(use)
    app.get('/', (_req, res) => {
      handled++
      res.send('ok')
    })
    app.use((error: Error, _req: unknown, res: express5.Response, _next: unknown) => {
      errors.push(error)
      res.status(500).send('handled')
    })
    return { url: await listening(http.createServer(app)), errors, handled: () => handled }
  }
  if (host === 'koa' || host === 'koa2') {
    const app = host === 'koa' ? new Koa3() : new Koa2()
    app.silent = true
    app.on('error', (error: Error) => errors.push(error))
    app.use(use)
    app.use((ctx) => {
      handled++
      ctx.body = 'ok'
    })
    return { url: await listening(http.createServer(app.callback())), errors, handled: () => handled }
  }
  if (host === 'hono') {
    const app = new Hono()
    app.onError((error, c) => {
      errors.push(error)
      return c.text('handled', 500)
    })
    app.use(use)
    app.get('/', (c) => {
      handled++
      return c.text('ok')
    })
    return {
      url: await listening(createAdaptorServer({ fetch: app.fetch }) as http.Server),
      errors,
      handled: () => handled,
    }
  }
  const app: FastifyInstance = Fastify()
  closers.push(() => app.close())
  app.setErrorHandler((error, _request, reply) => {
    errors.push(error as Error)
    void reply.code(500).send('handled')
  })
  if (host === 'fastify') await app.register(use)
  else app.addHook('onRequest', use)
  app.get('/', async () => {
    handled++
    return 'ok'
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  return {
    url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
    errors,
    handled: () => handled,
  }
}

const CASES = ADAPTERS.flatMap((adapter) =>
  HOSTS.filter((host) => FAMILY[host].module !== adapter).map((host) => ({ adapter, host })),
)

describe('an adapter mounted in another framework', () => {
  it.each(CASES)(
    'tollgate/$adapter in $host: the framework answers the error, which names the import to use',
    async ({ adapter, host }) => {
      const store = createMemoryStore()
      const middleware = MODULES[adapter].semaphore({ permits: 1, name: `wrong-${adapter}`, store })
      const family = FAMILY[host]
      const expected = `tollgate/${adapter}'s semaphore() was mounted in ${family.name}: import { semaphore } from 'tollgate/${family.module}' and ${family.mount}(semaphore(...)).`
      if (host === 'fastify') {
        // A plugin runs when the app starts: the mix-up is found then, before any request.
        await expect(mount(host, middleware)).rejects.toMatchObject({
          code: 'ERR_TOLLGATE_WRONG_ADAPTER',
          message: expected,
        })
        return
      }
      const app = await mount(host, middleware)
      for (let i = 0; i < 2; i++) expect((await fetch(app.url)).status).toBe(500)
      expect(app.errors.map((error) => [(error as { code?: string }).code, error.message])).toEqual([
        ['ERR_TOLLGATE_WRONG_ADAPTER', expected],
        ['ERR_TOLLGATE_WRONG_ADAPTER', expected],
      ])
      // Found at the entry: nothing was admitted or held, and the handler never ran.
      expect(app.handled()).toBe(0)
      expect(middleware.counters).toMatchObject({ admitted: 0, inFlight: 0, queued: 0 })
      await store.close()
    },
  )

  it("names rwlock() for a read/write lock, and Fastify's plugin added as a hook", async () => {
    const koaIn = await mount('express', tgKoa.rwlock())
    expect((await fetch(koaIn.url)).status).toBe(500)
    expect(koaIn.errors[0]?.message).toBe(
      "tollgate/koa's rwlock() was mounted in an Express app: import { rwlock } from 'tollgate/express' and app.use(rwlock(...)).",
    )
    const hooked = await mount('fastify-hook', tgFastify.semaphore({ permits: 1, name: 'hooked' }))
    expect((await fetch(hooked.url)).status).toBe(500)
    expect(hooked.errors[0]?.message).toBe(
      "tollgate/fastify's semaphore() is a Fastify plugin, not a hook: await app.register(semaphore(...)), or pass its .onRequest as the hook.",
    )
    expect(hooked.handled()).toBe(0)
  })
})

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** Mount tollgate/`adapter` in `host` in a child process, send one request; the child prints the
 * status and exits 0, unless the mix-up kills it. */
async function inChild(
  adapter: Adapter,
  host: 'koa' | 'express4' | 'node',
): Promise<{ code: number | null; output: string }> {
  const app = {
    koa: `const { default: Koa } = await import('koa'); const app = new Koa(); app.use(mw); app.use((ctx) => { ctx.body = 'ok' }); const server = http.createServer(app.callback())`,
    express4: `const { default: express } = await import('express4'); const app = express(); app.use(mw); app.get('/', (req, res) => res.send('ok')); const server = http.createServer(app)`,
    node: `const server = http.createServer(mw)`,
  }[host]
  const code = `import http from 'node:http'
const { semaphore } = await import(${JSON.stringify(`${ROOT}src/middleware/${adapter}.ts`)})
const mw = semaphore({ permits: 1, name: 'child' })
${app}
server.listen(0, '127.0.0.1', async () => {
  const response = await fetch('http://127.0.0.1:' + server.address().port + '/')
  console.log('status ' + response.status)
  server.closeAllConnections()
  server.close()
})
`
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: ROOT,
    // Express logs the errors it answers unless NODE_ENV is 'test' (as vitest sets it).
    env: { ...process.env, NODE_ENV: 'development' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000)
  try {
    const [exitCode] = (await once(child, 'exit')) as [number | null]
    return { code: exitCode, output }
  } finally {
    clearTimeout(timer)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  }
}

describe('a mix-up never crashes the process', () => {
  it.each([
    ['express', 'koa', "import { semaphore } from 'tollgate/koa'"], // was: TypeError: next is not a function
    ['koa', 'express4', "import { semaphore } from 'tollgate/express'"], // an unhandled rejection
    ['hono', 'express4', "import { semaphore } from 'tollgate/express'"], // an unhandled rejection
    ['express', 'node', 'mount it in an Express app with app.use(semaphore(...))'], // plain http.createServer
  ] as const)(
    'tollgate/%s in %s: answered 500, the error logged, the process lives on',
    async (adapter, host, advice) => {
      const { code, output } = await inChild(adapter, host)
      expect({ code, output }).toMatchObject({ code: 0, output: expect.stringContaining('status 500') })
      expect(output).toContain(advice)
    },
    30_000,
  )
})

describe('what must not change: each adapter in its own framework', () => {
  it.each([
    ['express', 'express'],
    ['express', 'express4'],
    ['koa', 'koa'],
    ['koa', 'koa2'],
    ['fastify', 'fastify'],
    ['hono', 'hono'],
  ] as const)('tollgate/%s in %s admits the request and reaches the handler', async (adapter, host) => {
    const middleware = MODULES[adapter].semaphore({
      permits: 2,
      name: `own-${host}`,
      store: createMemoryStore(),
    })
    const app = await mount(host, middleware)
    const response = await fetch(app.url)
    expect([response.status, await response.text()]).toEqual([200, 'ok'])
    expect(response.headers.get('ratelimit-policy')).toContain(`own-${host}`)
    expect(app.errors).toEqual([])
    expect(app.handled()).toBe(1)
    expect(middleware.counters.admitted).toBe(1)
  })

  it("Fastify's .onRequest on one route, and Express's middleware on a bare Node server with a next", async () => {
    const limiter = tgFastify.semaphore({ permits: 1, name: 'route-hook', store: createMemoryStore() })
    const app = Fastify()
    closers.push(() => app.close())
    app.get('/', { onRequest: limiter.onRequest }, async () => 'ok')
    await app.listen({ port: 0, host: '127.0.0.1' })
    const response = await fetch(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/`)
    expect([response.status, await response.text()]).toEqual([200, 'ok'])
    // connect-style: Node's req and res and a next (as koa-connect or @fastify/express call it).
    const mw = tgExpress.semaphore({ permits: 1, name: 'connect', store: createMemoryStore() })
    const url = await listening(
      http.createServer((req, res) => mw(req, res, (error?: unknown) => res.end(error ? 'error' : 'next'))),
    )
    expect(await (await fetch(url)).text()).toBe('next')
  })
})
