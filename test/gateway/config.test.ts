// Flags and config file -> GatewayConfig: defaults, precedence, and errors that name the flag or path.
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import {
  GATEWAY_DEFAULTS,
  GatewayConfigError,
  loadConfig,
  parseFlags,
  readConfigFile,
  resolveConfig,
  validateConfigFile,
} from '../../src/gateway/index.js'
import { parseAdaptiveLimitOptions } from '../../src/primitives/adaptive/controller.js'

const EXAMPLE = fileURLToPath(new URL('../../examples/gateway.yaml', import.meta.url))

/** The message of the GatewayConfigError `fn` throws. */
function problem(fn: () => unknown): string {
  try {
    fn()
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayConfigError)
    expect((error as GatewayConfigError).code).toBe('ERR_TOLLGATE_CONFIG')
    return (error as Error).message
  }
  throw new Error('expected a GatewayConfigError')
}

describe('gateway flags', () => {
  it('builds one catch-all route from flags, with the documented defaults', () => {
    const config = resolveConfig({}, parseFlags(['--upstream', 'http://127.0.0.1:3000']))
    expect(config).toMatchObject({
      host: '127.0.0.1',
      port: 8080,
      admin: { host: '127.0.0.1', port: 9090 },
      store: { kind: 'memory' },
      ttlMs: 30_000,
    })
    expect(config.routes).toHaveLength(1)
    expect(config.routes[0]).toMatchObject({
      name: 'default',
      pathPrefix: '/',
      timeouts: {
        upstreamMs: GATEWAY_DEFAULTS.upstreamTimeoutMs,
        sendMs: 60_000,
        clientBodyMs: 10_000,
        requestMs: 60_000,
        websocketIdleMs: 60_000,
      },
      requestBufferBytes: 0,
      concurrency: {
        permits: 10,
        per: 'global',
        tenantHeader: 'x-tenant-id',
        maxWaitMs: 1000,
        maxQueue: 100,
        keepAliveMs: 0, // permit keep-alive is opt-in
      },
    })
    expect(config.routes[0]!.upstream.href).toBe('http://127.0.0.1:3000/')
  })

  it('reads every flag', () => {
    const flags = parseFlags([
      '--upstream=http://u:1',
      '--port=0',
      '--host=0.0.0.0',
      '--permits=3',
      '--per=tenant',
      '--tenant-header=X-Org',
      '--max-wait-ms=0',
      '--max-queue=7',
      '--redis-cluster=redis://a:1, redis://b:2',
      '--prefix=p',
      '--admin-port=0',
      '--admin-host=::1',
      '--ttl-ms=1000',
      '--timeout-ms=500',
      '--send-timeout-ms=501',
      '--client-body-timeout-ms=502',
      '--request-timeout-ms=503',
      '--websocket-idle-timeout-ms=504',
      '--request-buffer-bytes=4096',
      '--command-timeout-ms=505',
      '--merge-slashes=off',
      '--escaped-slashes=keep',
      '--shutdown-grace-ms=0',
      '--fail-open',
      '--permit-keepalive-ms=100',
      '--trust-proxy',
      '--log-level=warn',
    ])
    const config = resolveConfig({}, flags)
    expect(config).toMatchObject({
      host: '0.0.0.0',
      port: 0,
      admin: { host: '::1', port: 0 },
      store: { kind: 'cluster', urls: ['redis://a:1', 'redis://b:2'] },
      prefix: 'p',
      ttlMs: 1000,
      shutdownGraceMs: 0,
      logLevel: 'warn',
      trustProxy: 1,
      commandTimeoutMs: 505,
      paths: { mergeSlashes: false, escapedSlashes: 'keep' },
    })
    expect(config.routes[0]).toMatchObject({
      timeouts: { upstreamMs: 500, sendMs: 501, clientBodyMs: 502, requestMs: 503, websocketIdleMs: 504 },
      requestBufferBytes: 4096,
      concurrency: {
        permits: 3,
        per: 'tenant',
        tenantHeader: 'x-org',
        maxWaitMs: 0,
        maxQueue: 7,
        failOpen: true,
        keepAliveMs: 100,
      },
    })
  })

  it.each([
    [['--permits', '0'], '--permits: expected a positive integer (got "0")'],
    [['--permits', '2.5'], '--permits: expected a positive integer'],
    [['--port', '70000'], '--port: expected a port number from 0 to 65535'],
    [['--per', 'user'], '--per: expected one of global, route, tenant, ip'],
    [['--upstream', 'localhost:3000'], '--upstream: expected an http:// or https:// URL'],
    [['--redis', 'http://x'], '--redis: expected a redis:// or rediss:// URL'],
    [
      ['--redis', 'redis://a', '--redis-cluster', 'redis://b'],
      '--redis-cluster: give one of --redis, --redis-cluster, --redis-sentinel',
    ],
    [['--tenant-header', 'x y'], '--tenant-header: expected an HTTP header name'],
    [['--max-wait-ms', ''], '--max-wait-ms: expected an integer of milliseconds >= 0'],
    // Numbers are plain decimal digits: exponents, hex, signs and spaces are not.
    [['--permits', '1e3'], '--permits: expected a positive integer (got "1e3")'],
    [['--permits', '0x10'], '--permits: expected a positive integer (got "0x10")'],
    [['--permits', ' 5'], '--permits: expected a positive integer'],
    [['--upstream', 'http://user:pass@u:1'], '--upstream: credentials (user:password@) in the upstream URL'],
    [['--upstream', 'http://u:1/?a=1'], '--upstream: expected an upstream URL without a query or fragment'],
    [['--merge-slashes', 'yes'], '--merge-slashes: expected on or off'],
    [
      ['--permit-keepalive-ms', '10001'],
      '--permit-keepalive-ms: expected an integer of milliseconds from 0 (off) to 10000',
    ],
    [['--permit-keepalive-ms=-1'], '--permit-keepalive-ms: expected an integer of milliseconds'],
    [['--watch-config'], '--watch-config: needs --config'],
    [['--nope'], '--nope: unknown flag'],
    [['--port'], '--port: expected a value'],
    [['serve'], 'serve: unexpected argument'],
  ])('rejects %j naming the flag', (argv, message) => {
    expect(problem(() => parseFlags(argv))).toContain(message)
  })

  it('reads TOLLGATE_* for every flag argv lacks: flags win over the environment, which wins over the file', () => {
    const env = { TOLLGATE_PERMITS: '3', TOLLGATE_UPSTREAM: 'http://env:1', TOLLGATE_FAIL_OPEN: 'true' }
    expect(parseFlags([], env)).toMatchObject({ permits: 3, upstream: 'http://env:1', failOpen: true })
    expect(parseFlags(['--permits', '4'], env).permits).toBe(4)
    const file = { defaults: { upstream: 'http://file:1', concurrency: { permits: 9, maxQueue: 5 } } }
    const route = resolveConfig(file, parseFlags([], env)).routes[0]
    expect(route?.upstream.href).toBe('http://env:1/')
    expect(route?.concurrency).toMatchObject({ permits: 3, maxQueue: 5, failOpen: true })
    // A store flag on the command line beats a store variable of another kind.
    const flags = parseFlags(['--redis', 'redis://a:1'], { TOLLGATE_REDIS_CLUSTER: 'redis://b:1' })
    expect(flags.redis).toBe('redis://a:1')
    expect(flags.redisCluster).toBeUndefined()
    expect(problem(() => parseFlags([], { TOLLGATE_PERMITS: '1e3' }))).toBe(
      'TOLLGATE_PERMITS: expected a positive integer (got "1e3")',
    )
    expect(problem(() => parseFlags([], { TOLLGATE_RWLOCK: 'yes' }))).toBe(
      'TOLLGATE_RWLOCK: expected true or false (got "yes")',
    )
    // A URL's password is never echoed.
    const message = problem(() => parseFlags([], { TOLLGATE_REDIS_URL: 'redis://app:s3cretPW@h:99999999' }))
    expect(message).toContain(
      'TOLLGATE_REDIS_URL: expected a redis:// or rediss:// URL (got "redis://app:***@h:99999999")',
    )
    expect(message).not.toContain('s3cretPW')
    // Empty variables count as unset, as in most CLIs.
    expect(parseFlags([], { TOLLGATE_PERMITS: '' }).permits).toBeUndefined()
  })

  it('Sentinel, TLS and secrets: from flags or the file, files read and checked at load', () => {
    const sentinel = resolveConfig(
      { redis: { sentinel: { sentinels: [{ host: '10.0.0.1', port: 26379 }] } } },
      parseFlags(['--upstream', 'http://u:1']),
    ).store
    expect(sentinel).toEqual({
      kind: 'sentinel',
      sentinels: [{ host: '10.0.0.1', port: 26379 }],
      name: 'mymaster',
      password: undefined,
      tls: undefined,
    })
    expect(
      parseFlags(['--redis-sentinel', '[::1]:26379,s2:26380', '--redis-sentinel-name', 'cache']),
    ).toMatchObject({
      redisSentinel: [
        { host: '::1', port: 26379 },
        { host: 's2', port: 26380 },
      ],
      redisSentinelName: 'cache',
    })
    expect(problem(() => parseFlags(['--redis-sentinel', 's:0']))).toContain(
      '--redis-sentinel: expected host:port',
    )
    expect(problem(() => validateConfigFile({ redis: { tls: { ca: '/x', verify: false } } }))).toBe(
      'redis.tls.verify: unknown field',
    )
    expect(
      problem(() =>
        resolveConfig(
          {},
          parseFlags([
            '--upstream',
            'http://u:1',
            '--redis',
            'redis://r:1',
            '--redis-tls-cert',
            '/nonexistent.pem',
          ]),
        ),
      ),
    ).toBe('--redis-tls-cert: cannot read /nonexistent.pem: ENOENT')
    const password = resolveConfig(
      {},
      parseFlags(['--upstream', 'http://u:1', '--redis', 'rediss://r:1'], {
        TOLLGATE_REDIS_PASSWORD: 's3cret',
      }),
    ).store
    expect(password).toMatchObject({ kind: 'redis', password: 's3cret', tls: undefined })
  })

  it('requires an upstream', () => {
    expect(problem(() => resolveConfig({}, parseFlags([])))).toMatch(/^--upstream: required/)
  })

  it('--rwlock locks every route, waiting and failing as the concurrency flags say', () => {
    const config = resolveConfig(
      {},
      parseFlags(['--upstream', 'http://u', '--rwlock', '--max-wait-ms', '50', '--fail-open']),
    )
    expect(config.routes[0]!.rwlock).toEqual({
      resourcePattern: undefined,
      maxWaitMs: 50,
      maxQueue: 100,
      statusCode: undefined,
      failOpen: true,
    })
    expect(config.routes[0]!.concurrency).toMatchObject({ maxWaitMs: 50, failOpen: true })
  })
})

describe('gateway config file', () => {
  it('loads the complete example file', async () => {
    const config = await loadConfig({ config: EXAMPLE })
    // As printed, it runs without Redis, in front of one upstream on :3000 (docs/gateway.md).
    expect(config.store).toEqual({ kind: 'memory' })
    expect(config.routes.map((route) => route.name)).toEqual(['export', 'docs', 'health', 'search', 'api'])
    const [exportRoute, docs, health, search, api] = config.routes
    expect(exportRoute!.host).toBeUndefined() // any Host: curl localhost:8080/export reaches it
    expect(exportRoute).toMatchObject({
      methods: ['GET', 'POST'],
      timeouts: { upstreamMs: 120_000 },
      concurrency: {
        permits: 2,
        per: 'tenant',
        maxWaitMs: 5000,
        statusCode: 503,
        overrides: { 'big-customer': 8 },
      },
    })
    expect(exportRoute!.upstream.port).toBe('3000')
    expect(docs!.rwlock).toMatchObject({ maxWaitMs: 2000, maxQueue: 100, statusCode: 409, failOpen: false })
    expect(docs!.rwlock!.resourcePattern!.exec('/docs/42/comments')?.[1]).toBe('42')
    expect(docs!.concurrency).toMatchObject({ permits: 10, per: 'global' })
    expect(health!.concurrency).toBeUndefined()
    expect(health!.rwlock).toBeUndefined()
    expect(search!.concurrency).toMatchObject({
      per: 'route',
      adaptive: { min: 4, max: 200, initial: 16, algorithm: 'gradient', windowMs: 1000, scope: 'fleet' },
    })
    expect(api).toMatchObject({
      concurrency: { permits: 50, per: 'route' },
      timeouts: { upstreamMs: 30_000 },
    })
    expect(api!.upstream.port).toBe('3000')
  })

  it('lets flags win over the file', async () => {
    const config = await loadConfig(
      parseFlags(['--config', EXAMPLE, '--port', '0', '--permits', '4', '--redis', 'redis://other:1']),
    )
    expect(config.port).toBe(0)
    expect(config.store).toEqual({ kind: 'redis', url: 'redis://other:1' })
    // Flags set the defaults; a route's own permits still win.
    expect(config.routes.map((route) => route.concurrency?.permits)).toEqual([2, 4, undefined, 4, 50]) // (search's is unused: it is adaptive)
    const plain = resolveConfig(
      validateConfigFile({ defaults: { upstream: 'http://u' } }),
      parseFlags(['--permits', '4']),
    )
    expect(plain.routes[0]!.concurrency?.permits).toBe(4)
  })

  it('names the path of every bad field', () => {
    const message = problem(() =>
      validateConfigFile({
        listen: { port: -1 },
        admin: 'yes',
        routes: [
          { match: { pathPrefix: '/a' }, rwlock: { resourcePattern: '(' } },
          {
            match: { pathPrefix: 'b' },
            concurrency: { permits: 0, per: 'user', maxWaitMs: 'long' },
            extra: 1,
          },
          {
            match: { pathPrefix: '/c', methods: [] },
            concurrency: { overrides: { vip: 0 }, keepAliveMs: 1.5 },
            timeouts: { upstreamMs: 0 },
          },
        ],
        surprise: true,
      }),
    )
    expect(message.split('\n').sort()).toEqual(
      [
        'listen.port: expected a port number from 0 to 65535',
        'admin: expected an admin object or false',
        'routes[1].match.pathPrefix: expected a path starting with /',
        'routes[1].concurrency.permits: expected a positive integer',
        'routes[1].concurrency.per: expected one of global, route, tenant, ip',
        'routes[1].concurrency.maxWaitMs: expected an integer of milliseconds from 0 to 600000',
        'routes[1].extra: unknown field',
        'routes[0].rwlock.resourcePattern: expected a valid regular expression',
        'routes[2].match.methods: expected a non-empty list',
        'routes[2].concurrency.overrides.vip: expected a positive integer',
        'routes[2].concurrency.keepAliveMs: expected an integer of milliseconds from 0 (off) to 10000',
        'routes[2].timeouts.upstreamMs: expected a positive integer',
        'surprise: unknown field',
      ].sort(),
    )
  })

  it('rejects a maxWaitMs over 600000, hosts that are not host names, non-canonical prefixes and upstream credentials', () => {
    const message = problem(() =>
      validateConfigFile({
        defaults: { upstream: 'http://user:secret@u:1' },
        routes: [
          { match: { pathPrefix: '/a', host: 'a b' }, concurrency: { maxWaitMs: 600_001 } },
          { match: { pathPrefix: '/b/../c' }, rwlock: { maxWaitMs: 700_000 } },
          { match: { pathPrefix: '/d//e' } },
        ],
      }),
    )
    expect(message.split('\n').sort()).toEqual(
      [
        'defaults.upstream: credentials (user:password@) in the upstream URL are not supported: the gateway never sends them',
        'routes[0].match.host: expected a host name (letters, digits, - and .), an IPv4 address or [IPv6]',
        'routes[0].concurrency.maxWaitMs: expected an integer of milliseconds from 0 to 600000',
        'routes[1].match.pathPrefix: expected a canonical path: no dot segments, repeated slashes, ";", "?", "#", backslashes, encoded slashes or needless escapes',
        'routes[1].rwlock.maxWaitMs: expected an integer of milliseconds from 0 to 600000',
        'routes[2].match.pathPrefix: expected a canonical path: no dot segments, repeated slashes, ";", "?", "#", backslashes, encoded slashes or needless escapes',
      ].sort(),
    )
  })

  it('checks what only the whole config can tell', () => {
    const twice = validateConfigFile({
      defaults: { upstream: 'http://u' },
      routes: [
        { name: 'a', match: { pathPrefix: '/x' } },
        { name: 'a', match: { pathPrefix: '/y' } },
        { match: { pathPrefix: '/z' }, concurrency: { permits: 3 } },
        { match: { pathPrefix: '/~' } },
      ],
    })
    expect(problem(() => resolveConfig(twice)).split('\n')).toEqual([
      'routes[1].name: "a" is also the name of routes[0]',
      'routes[3].name: required: the path prefix is not a usable name (letters, digits and . _ : / -)',
      'routes[2].concurrency: per: global routes share one bucket, so their concurrency settings must equal those of routes[0]',
    ])
    expect(
      problem(() => resolveConfig(validateConfigFile({ routes: [{ match: { pathPrefix: '/' } }] }))),
    ).toBe('routes[0].upstream: required: give --upstream, defaults.upstream or routes[0].upstream')
    expect(
      problem(() =>
        resolveConfig(validateConfigFile({ redis: { url: 'redis://a', cluster: ['redis://b'] } }), {
          upstream: 'http://u',
        }),
      ),
    ).toBe('redis: give one of redis.url, redis.cluster, redis.sentinel')
  })

  it('an adaptive limit: from the file or the --adaptive-* flags, completed with its defaults', () => {
    const fromFile = resolveConfig(
      validateConfigFile({
        defaults: { upstream: 'http://u', concurrency: { permits: 10 } },
        routes: [
          {
            match: { pathPrefix: '/a' },
            concurrency: { per: 'route', adaptive: { max: 64, drops: ['5xx', 'timeout'] } },
          },
          { match: { pathPrefix: '/b' }, concurrency: { per: 'route' } },
        ],
      }),
    )
    expect(fromFile.routes[0]!.concurrency?.adaptive).toMatchObject({
      min: 1,
      max: 64,
      initial: 1,
      algorithm: 'gradient',
      windowMs: 1000,
      drops: ['5xx', 'timeout'],
      scope: 'fleet',
    })
    expect(fromFile.routes[1]!.concurrency).toMatchObject({ permits: 10, adaptive: undefined })
    const fromFlags = resolveConfig(
      {},
      parseFlags([
        '--upstream=http://u',
        '--adaptive-max=40',
        '--adaptive-min=2',
        '--adaptive-initial=8',
        '--adaptive-algorithm=aimd',
        '--adaptive-window-ms=500',
        '--adaptive-scope=local',
        '--adaptive-drops=timeout,503,5xx',
      ]),
    )
    expect(fromFlags.routes[0]!.concurrency?.adaptive).toMatchObject({
      min: 2,
      max: 40,
      initial: 8,
      algorithm: 'aimd',
      windowMs: 500,
      scope: 'local',
      drops: ['timeout', 503, '5xx'],
    })
    // A file's default permits give way to the flags' adaptive limit; a route's own permits are refused
    // beside its own adaptive limit.
    const file = validateConfigFile({ defaults: { upstream: 'http://u', concurrency: { permits: 10 } } })
    expect(resolveConfig(file, parseFlags(['--adaptive-max=9'])).routes[0]!.concurrency?.adaptive?.max).toBe(
      9,
    )
  })

  it('an adaptive limit refuses what would not be one limit of requests, naming the field', () => {
    const message = problem(() =>
      resolveConfig(
        validateConfigFile({
          defaults: { upstream: 'http://u' },
          routes: [
            { match: { pathPrefix: '/a' }, concurrency: { per: 'route', permits: 5, adaptive: { max: 8 } } },
            { match: { pathPrefix: '/b' }, concurrency: { per: 'tenant', adaptive: { max: 8 } } },
            { match: { pathPrefix: '/c' }, concurrency: { per: 'route', weight: 2, adaptive: { max: 8 } } },
            {
              match: { pathPrefix: '/d' },
              concurrency: { per: 'route', keepAliveMs: 50, adaptive: { max: 8 } },
            },
            { match: { pathPrefix: '/e' }, concurrency: { per: 'route', adaptive: { max: 8, min: 9 } } },
            { match: { pathPrefix: '/f' }, concurrency: { per: 'route', adaptive: { max: 8, initial: 9 } } },
          ],
        }),
      ),
    )
    expect(message.split('\n')).toEqual([
      'routes[0].concurrency.permits: not beside adaptive: an adaptive limit starts at adaptive.initial, within adaptive.min and adaptive.max',
      'routes[1].concurrency.per: an adaptive limit is one bucket: per global or per route',
      'routes[2].concurrency.weight: not beside adaptive: an adaptive limit counts requests',
      'routes[3].concurrency.keepAliveMs: not beside adaptive: permit keep-alive would hide the requests it measures',
      'routes[4].concurrency.adaptive.min: expected an integer from 1 to 8 (received 9).',
      'routes[5].concurrency.adaptive.initial: expected an integer from 1 to 8 (received 9).',
    ])
    expect(
      problem(() =>
        validateConfigFile({
          routes: [
            {
              match: { pathPrefix: '/' },
              concurrency: {
                adaptive: {
                  max: 8,
                  drops: [200],
                  scope: 'world',
                  algorithm: 'vegas',
                  speed: 2,
                  windowMs: 50,
                  smoothing: 0,
                  backoff: 1,
                  probeEvery: 2,
                },
              },
            },
          ],
        }),
      )
        .split('\n')
        .sort(),
    ).toEqual(
      [
        "routes[0].concurrency.adaptive.drops[0]: expected an HTTP status from 400 to 599, '5xx' or 'timeout'",
        'routes[0].concurrency.adaptive.scope: expected fleet or local',
        'routes[0].concurrency.adaptive.algorithm: expected gradient or aimd',
        'routes[0].concurrency.adaptive.speed: unknown field',
        'routes[0].concurrency.adaptive.windowMs: expected an integer of milliseconds from 100 to 3600000',
        'routes[0].concurrency.adaptive.smoothing: expected a number above 0, at most 1',
        'routes[0].concurrency.adaptive.backoff: expected a number above 0, at most 0.99',
        'routes[0].concurrency.adaptive.probeEvery: expected an integer of windows from 3 to 1000000',
      ].sort(),
    )
    // The library's bounds, the same: what the file accepts, createSemaphore accepts.
    const edges = { max: 8, windowMs: 100, smoothing: 0.001, backoff: 0.001, probeEvery: 3 }
    expect(() =>
      validateConfigFile({ routes: [{ match: { pathPrefix: '/' }, concurrency: { adaptive: edges } }] }),
    ).not.toThrow()
    expect(() => parseAdaptiveLimitOptions(edges)).not.toThrow()
    expect(problem(() => parseFlags(['--adaptive-window-ms=99']))).toContain(
      '--adaptive-window-ms: expected an integer of milliseconds from 100 to 3600000',
    )
    expect(problem(() => parseFlags(['--adaptive-drops=timeout,200']))).toContain(
      '--adaptive-drops: expected a list of statuses',
    )
    expect(problem(() => parseFlags(['--adaptive-scope=world']))).toContain(
      '--adaptive-scope: expected fleet or local',
    )
  })

  it('reports unreadable and unparsable files', async () => {
    await expect(readConfigFile('/nonexistent/tollgate.yaml')).rejects.toThrow(/^--config: cannot read/)
    await expect(
      readConfigFile(fileURLToPath(new URL('../../package.json', import.meta.url))),
    ).rejects.toThrow(/unknown field/)
    await expect(readConfigFile(fileURLToPath(import.meta.url))).rejects.toThrow(/not valid YAML/)
  })
})
