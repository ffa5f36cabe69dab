// The deployment examples stay true to the gateway: examples/deploy/kubernetes.yaml and
// examples/deploy/tollgate.service use only flags and TOLLGATE_* variables the bin knows, with values it
// accepts; their probes, grace periods and config file fit the gateway's flags; and every metric
// examples/grafana-dashboard.json queries is one a running gateway serves, with the labels it groups by.
import { readFileSync } from 'node:fs'
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { parse as parseYaml, parseAllDocuments } from 'yaml'
import { envName } from '../../src/gateway/config/flags.js'
import {
  type GatewayFlags,
  parseFlags,
  resolveConfig,
  USAGE,
  validateConfigFile,
} from '../../src/gateway/config/index.js'
import { baseFlags, redisUrl, spawnGateway } from '../helpers/gateway.js'
import { topology, uniquePrefix } from '../helpers/redis.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const read = (file: string) => readFileSync(`${ROOT}/${file}`, 'utf8')
const KUBERNETES = 'examples/deploy/kubernetes.yaml'
const SYSTEMD = 'examples/deploy/tollgate.service'
const DASHBOARD = 'examples/grafana-dashboard.json'

/** Every flag of --help: `--port`, ..., `--help`, `--version`. */
const FLAGS = new Set([...USAGE.matchAll(/^\s+(?:-\w, )?(--[a-z][a-z-]*)/gm)].map((m) => m[1]!))
/** Every TOLLGATE_* variable: one per flag (not --help / --version), and the two secrets that exist only
 * as variables (flags.ts reads them from the environment directly). */
const ENV_NAMES = new Set([
  ...[...FLAGS].filter((f) => f !== '--help' && f !== '--version').map((f) => envName(f.slice(2))),
  'TOLLGATE_REDIS_PASSWORD',
  'TOLLGATE_ADMIN_TOKEN',
])
/** Flags of other commands the examples' comments show (kubectl, systemctl): not the gateway's. */
const OTHER_COMMANDS_FLAGS = new Set(['--from-file', '--now'])

/** Every `--flag` anywhere in the text (comments too) is a flag of the gateway, or of another command
 * the comments run; every TOLLGATE_* name is a variable the gateway reads. */
function checkNames(text: string): void {
  const flags = [...text.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*/g)].map((m) => m[0])
  expect(flags.filter((flag) => !FLAGS.has(flag) && !OTHER_COMMANDS_FLAGS.has(flag))).toEqual([])
  const names = [...text.matchAll(/\bTOLLGATE_[A-Z0-9_]+/g)].map((m) => m[0])
  expect(names.filter((name) => !ENV_NAMES.has(name))).toEqual([])
}

/** parseFlags, with any GatewayConfigError turned into a failed expectation that names the flag. */
function parseOrFail(args: string[], env: Record<string, string>): GatewayFlags {
  try {
    return parseFlags(args, env)
  } catch (error) {
    expect.unreachable(
      `the gateway rejects ${JSON.stringify(args)} / ${JSON.stringify(env)}: ${String(error)}`,
    )
  }
}

/** A config file as the gateway reads it (YAML, duplicate keys are errors), validated and resolved with
 * the flags (files the flags name are not read here: they exist only where the example runs). */
function checkConfigFile(text: string, flags: GatewayFlags): void {
  const file = validateConfigFile(parseYaml(text, { uniqueKeys: true }) ?? {})
  const config = resolveConfig(file, { ...flags, redisPasswordFile: undefined, adminTokenFile: undefined })
  expect(config.routes.length).toBeGreaterThan(0)
}

type Json = Record<string, unknown>
const obj = (value: unknown, what: string): Json => {
  expect(value, what).toBeTypeOf('object')
  expect(value, what).not.toBeNull()
  return value as Json
}
const list = (value: unknown, what: string): unknown[] => {
  expect(Array.isArray(value), `${what} is a list`).toBe(true)
  return value as unknown[]
}

/** Everything the Kubernetes example promises, as expectations (throws on the first broken one). */
function checkKubernetes(text: string): void {
  checkNames(text)
  const docs = parseAllDocuments(text, { uniqueKeys: true })
  const documents = Array.isArray(docs) ? docs : [docs]
  for (const doc of documents) expect(doc.errors.map((e) => e.message)).toEqual([])
  const objects = documents.map((doc) => obj(doc.toJS(), 'a document'))
  const ofKind = (kind: string) => {
    const found = objects.filter((o) => o.kind === kind)
    expect(found, `one ${kind}`).toHaveLength(1)
    return found[0]!
  }
  const configMap = ofKind('ConfigMap')
  const deployment = ofKind('Deployment')
  const service = ofKind('Service')
  const pod = obj(obj(obj(deployment.spec, 'spec').template, 'template').spec, 'pod spec')
  const containers = list(pod.containers, 'containers').map((c) => obj(c, 'container'))
  expect(containers).toHaveLength(1)
  const container = containers[0]!

  // Kubernetes takes only strings in command, args and env values (a bare 8080 is an error).
  const command = list(container.command, 'command')
  const args = list(container.args, 'args')
  for (const value of [...command, ...args])
    expect(value, 'command and args are strings').toBeTypeOf('string')
  expect(command).toEqual(['tollgate-gateway'])
  const env: Record<string, string> = {}
  for (const entry of list(container.env, 'env').map((e) => obj(e, 'env entry'))) {
    expect(entry.value, `${String(entry.name)} is a string`).toBeTypeOf('string')
    env[entry.name as string] = entry.value as string
  }
  const flags = parseOrFail(args as string[], env)

  // Reachable in a pod: both listeners on every interface.
  expect(flags.host).toBe('0.0.0.0')
  expect(flags.adminHost).toBe('0.0.0.0')
  expect(flags.watchConfig).toBe(true)
  expect(flags.redis).toMatch(/^rediss?:\/\//)

  const ports = new Map(
    list(container.ports, 'ports').map((p) => {
      const port = obj(p, 'port')
      return [port.name as string, port.containerPort as number]
    }),
  )
  const portOf = (port: unknown) => (typeof port === 'number' ? port : ports.get(port as string))
  expect(ports.get('http')).toBe(flags.port)
  const probe = (name: string) => obj(obj(container[name], name).httpGet, `${name}.httpGet`)
  const readiness = probe('readinessProbe')
  const liveness = probe('livenessProbe')
  expect(readiness.path).toBe('/readyz')
  expect(liveness.path).toBe('/healthz')
  expect(flags.adminPort).toBeDefined()
  expect(portOf(readiness.port)).toBe(flags.adminPort)
  expect(portOf(liveness.port)).toBe(flags.adminPort)

  // The grace period counts from the start of the preStop hook: it must cover the sleep and the drain.
  const preStop = obj(obj(container.lifecycle, 'lifecycle').preStop, 'preStop')
  const sleepCommand = preStop.exec ? list(obj(preStop.exec, 'exec').command, 'exec.command') : undefined
  const sleepSeconds = sleepCommand ? Number(sleepCommand[1]) : Number(obj(preStop.sleep, 'sleep').seconds)
  if (sleepCommand) expect(sleepCommand[0]).toBe('sleep')
  expect(sleepSeconds).toBeGreaterThan(0)
  expect(flags.shutdownGraceMs).toBeDefined()
  const graceSeconds = pod.terminationGracePeriodSeconds as number
  expect(graceSeconds * 1000).toBeGreaterThan(flags.shutdownGraceMs!)
  expect(graceSeconds * 1000).toBeGreaterThan(sleepSeconds * 1000 + flags.shutdownGraceMs!)

  // The config file is the ConfigMap's key, mounted as a directory (a subPath mount never updates).
  const volumes = new Map(
    list(pod.volumes, 'volumes').map((v) => [obj(v, 'volume').name as string, obj(v, 'volume')]),
  )
  const mountOf = (file: string | undefined) => {
    const mounts = list(container.volumeMounts, 'volumeMounts').map((m) => obj(m, 'volume mount'))
    const mount = mounts.find((m) => file?.startsWith(`${m.mountPath as string}/`))
    expect(mount, `a volume mounted where ${file} is`).toBeDefined()
    expect(mount!.subPath, 'no subPath').toBeUndefined()
    return {
      volume: volumes.get(mount!.name as string)!,
      key: file!.slice((mount!.mountPath as string).length + 1),
    }
  }
  const configMount = mountOf(flags.config)
  const metadata = obj(configMap.metadata, 'ConfigMap metadata')
  expect(obj(configMount.volume.configMap, 'configMap volume').name).toBe(metadata.name)
  const configText = obj(configMap.data, 'ConfigMap data')[configMount.key]
  expect(configText, `ConfigMap key ${configMount.key}`).toBeTypeOf('string')
  checkConfigFile(configText as string, flags)
  for (const file of [flags.adminTokenFile, flags.redisPasswordFile]) {
    expect(obj(mountOf(file).volume.secret, `secret volume of ${file}`).secretName).toBeTypeOf('string')
  }

  // The Service sends traffic to the proxy port of the same pods.
  const serviceSpec = obj(service.spec, 'Service spec')
  const podLabels = obj(
    obj(obj(deployment.spec, 'spec').template, 'template').metadata,
    'pod metadata',
  ).labels
  expect(podLabels).toMatchObject(obj(serviceSpec.selector, 'selector'))
  for (const port of list(serviceSpec.ports, 'Service ports'))
    expect(portOf(obj(port, 'Service port').targetPort)).toBe(flags.port)
}

/** The systemd unit: ExecStart's flags and the env file's documented variables parse, reload is
 * SIGHUP, stop is SIGTERM with time for the drain, and each credential the flags read is loaded. */
function checkUnit(text: string): void {
  checkNames(text)
  const lines = text.replace(/\\\n\s*/g, ' ').split('\n')
  const settings = new Map<string, string[]>()
  for (const line of lines) {
    const found = /^([A-Za-z]+)=(.*)$/.exec(line.trim())
    if (found) settings.set(found[1]!, [...(settings.get(found[1]!) ?? []), found[2]!.trim()])
  }
  const one = (key: string) => {
    expect(settings.get(key), key).toHaveLength(1)
    return settings.get(key)![0]!
  }
  expect(one('Type')).toBe('simple')
  expect(one('ExecReload')).toMatch(/^\/bin\/kill -HUP \$MAINPID$/)
  expect(one('KillSignal')).toBe('SIGTERM')
  expect(one('EnvironmentFile')).toMatch(/^-?\//)
  const words = one('ExecStart').split(/\s+/)
  expect(words.slice(0, 2)).toEqual(['/usr/bin/env', 'tollgate-gateway'])
  const args = words.slice(2)
  // The variables the comments show for the EnvironmentFile, with their values.
  const env = Object.fromEntries(
    [...text.matchAll(/^#\s+(TOLLGATE_[A-Z0-9_]+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!]),
  )
  expect(Object.keys(env).length).toBeGreaterThan(0)
  const flags = parseOrFail(args, env)
  expect(flags.host).toBe('0.0.0.0')
  expect(flags.config).toBeDefined()
  const stopSeconds = Number(/^(\d+)s?$/.exec(one('TimeoutStopSec'))?.[1])
  expect(stopSeconds * 1000).toBeGreaterThan(flags.shutdownGraceMs ?? 10_000)
  const credentials = new Set((settings.get('LoadCredential') ?? []).map((value) => value.split(':')[0]))
  const fromCredentials = args.filter((arg) => arg.includes('CREDENTIALS_DIRECTORY'))
  expect(fromCredentials.length).toBeGreaterThan(0)
  for (const arg of fromCredentials) {
    expect(arg).toMatch(/^\$\{CREDENTIALS_DIRECTORY\}\/[\w.-]+$/)
    expect(credentials.has(arg.split('/').pop())).toBe(true)
  }
}

describe('deployment examples', () => {
  it('D1: kubernetes.yaml uses known flags and variables, probes the admin port, drains within its grace period, mounts a valid config', () => {
    checkKubernetes(read(KUBERNETES))
  })

  it('D2: tollgate.service uses known flags and variables, reloads with SIGHUP, stops with SIGTERM after the drain', () => {
    checkUnit(read(SYSTEMD))
  })

  // The checks above fail on a broken example (each mutation must change the text).
  it.each([
    [KUBERNETES, '- --watch-config', '- --watch-confg'],
    [KUBERNETES, 'name: TOLLGATE_REDIS_URL', 'name: TOLLGATE_REDIS'],
    [KUBERNETES, "- '9090'", "- '9091'"],
    [KUBERNETES, 'path: /readyz', 'path: /ready'],
    [KUBERNETES, 'terminationGracePeriodSeconds: 30', 'terminationGracePeriodSeconds: 22'],
    [KUBERNETES, "- '20000'", '- 20000'],
    [KUBERNETES, '        maxWaitMs: 2000', '        maxWait: 2000'],
    [KUBERNETES, '+ --shutdown-grace-ms (20 s)', '+ --shutdown-grace (20 s)'],
    [SYSTEMD, '--shutdown-grace-ms 20000', '--shutdown-grace 20000'],
    [SYSTEMD, '#   TOLLGATE_REDIS_URL=', '#   TOLLGATE_REDIS_ADDR='],
    [SYSTEMD, '#   TOLLGATE_ACCESS_LOG_SAMPLE=0.1', '#   TOLLGATE_ACCESS_LOG_SAMPLE=10%'],
    [SYSTEMD, 'TimeoutStopSec=30', 'TimeoutStopSec=15'],
    [SYSTEMD, 'ExecReload=/bin/kill -HUP', 'ExecReload=/bin/kill -USR1'],
    [SYSTEMD, '${CREDENTIALS_DIRECTORY}/admin-token', '${CREDENTIALS_DIRECTORY}/admin-tokn'],
  ])('D3: %s with %j changed to %j fails the check', (file, from, to) => {
    const text = read(file)
    expect(text).toContain(from)
    const check = file === KUBERNETES ? checkKubernetes : checkUnit
    expect(() => check(text.replace(from, to))).toThrow()
  })
})

// --- The dashboard ---------------------------------------------------------------------------------

interface Target {
  expr: string
  legendFormat?: string
}

/** Every panel, those inside collapsed rows too. */
function panelsOf(panels: unknown[]): Json[] {
  return panels.flatMap((p) => {
    const panel = p as Json
    return [panel, ...panelsOf((panel.panels as unknown[] | undefined) ?? [])]
  })
}

/** PromQL identifiers that name tollgate metrics (as written: `tollgate_wait_seconds_bucket`). */
const metricNames = (expr: string) => [...expr.matchAll(/\btollgate_[a-zA-Z0-9_:]*/g)].map((m) => m[0])
/** Labels an expression groups by or selects on; `instance` and `job` come from Prometheus's scrape. */
function labelsOf(expr: string): string[] {
  const grouped = [...expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)].flatMap((m) => m[1]!.split(','))
  const selected = [...expr.matchAll(/\{([^}]*)\}/g)].flatMap((m) =>
    [...m[1]!.matchAll(/([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)/g)].map((l) => l[1]!),
  )
  const valuesOf = [...expr.matchAll(/label_values\(\s*[\w:]+\s*,\s*(\w+)\s*\)/g)].map((m) => m[1]!)
  return [...grouped, ...selected, ...valuesOf]
    .map((label) => label.trim())
    .filter((label) => label !== '' && label !== 'instance' && label !== 'job')
}

/** Prometheus text: the type of each metric family, and the label names of each sample name. */
function parseExposition(text: string) {
  const types = new Map<string, string>()
  const labels = new Map<string, Set<string>>()
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (type) types.set(type[1]!, type[2]!)
    const sample = /^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})? \S+$/.exec(line)
    if (!sample) continue
    const names = labels.get(sample[1]!) ?? new Set<string>()
    for (const pair of (sample[2] ?? '').matchAll(/(\w+)="/g)) names.add(pair[1]!)
    labels.set(sample[1]!, names)
  }
  return { types, labels }
}

/** The family a sample name belongs to: itself, or a histogram's (summary's) without _bucket/_sum/_count. */
function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name
  const base = /^(.*)_(bucket|sum|count)$/.exec(name)
  if (!base) return undefined
  const type = types.get(base[1]!)
  if (type === 'histogram' || (type === 'summary' && base[2] !== 'bucket')) return base[1]
  return undefined
}

describe('grafana dashboard', () => {
  it('D4: queries only metrics (and labels) a running gateway serves', async () => {
    const dashboard = JSON.parse(read(DASHBOARD)) as Json
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36)
    const variables = list(obj(dashboard.templating, 'templating').list, 'templating.list').map((v) =>
      obj(v, 'variable'),
    )
    const datasource = variables.find((v) => v.type === 'datasource')
    expect(datasource).toMatchObject({ name: 'DS_PROMETHEUS', query: 'prometheus' })
    const route = variables.find((v) => v.name === 'route')
    expect(route?.definition).toBe('label_values(tollgate_requests_in_flight, route)')

    const panels = panelsOf(list(dashboard.panels, 'panels')).filter((p) => p.type !== 'row')
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length)
    const queries: { panel: string; target: Target }[] = [
      { panel: 'variable route', target: { expr: route!.definition as string } },
    ]
    for (const panel of panels) {
      const grid = obj(panel.gridPos, `${String(panel.title)} gridPos`) as { x: number; w: number }
      expect(grid.x + grid.w, `${String(panel.title)} fits 24 columns`).toBeLessThanOrEqual(24)
      expect(obj(panel.datasource, 'panel datasource').uid).toBe('${DS_PROMETHEUS}')
      const targets = list(panel.targets, `${String(panel.title)} targets`) as Target[]
      expect(targets.length, `${String(panel.title)} has queries`).toBeGreaterThan(0)
      for (const target of targets) {
        expect(metricNames(target.expr), `${String(panel.title)}: ${target.expr}`).not.toEqual([])
        queries.push({ panel: String(panel.title), target })
      }
    }
    const queried = new Set(queries.flatMap(({ target }) => metricNames(target.expr)))

    // The real bin on the test Redis (so the Redis call histogram has samples), behind a tiny upstream.
    const upstream = http.createServer((_req, res) => res.end('ok'))
    upstream.listen(0, '127.0.0.1')
    await once(upstream, 'listening')
    try {
      const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
      const prefix = uniquePrefix().slice(0, -1)
      const gateway = await spawnGateway([
        ...baseFlags(upstreamUrl, prefix),
        '--redis',
        redisUrl(topology().standalone),
      ])
      for (let i = 0; i < 3; i++) expect((await fetch(`${gateway.url}/work/${i}`)).status).toBe(200)
      // One request the gateway refuses itself (an encoded slash): tollgate_refused_total gets a sample.
      expect((await fetch(`${gateway.url}/a%2Fb`)).status).toBe(400)
      const text = await (await fetch(`${gateway.adminUrl!}/metrics`)).text()
      const { types, labels } = parseExposition(text)

      const missing = [...queried].filter((name) => familyOf(name, types) === undefined)
      expect(missing, 'queried but not served').toEqual([])
      for (const name of queried) expect(text).toContain(`# TYPE ${familyOf(name, types)!} `)
      expect(new Set([...queried].map((name) => familyOf(name, types))).size).toBeGreaterThanOrEqual(10)

      for (const { panel, target } of queries) {
        const names = metricNames(target.expr)
        const served = new Set(names.flatMap((name) => [...(labels.get(name) ?? [])]))
        for (const name of names) expect(labels.has(name), `${panel}: samples of ${name}`).toBe(true)
        expect(
          labelsOf(target.expr).filter((label) => !served.has(label)),
          `${panel}: ${target.expr}`,
        ).toEqual([])
        // A legend names only labels the query keeps.
        const legend = [...(target.legendFormat ?? '').matchAll(/\{\{\s*(\w+)\s*\}\}/g)].map((m) => m[1]!)
        const kept = [...target.expr.matchAll(/\bby\s*\(([^)]*)\)/g)].flatMap((m) =>
          m[1]!.split(',').map((label) => label.trim()),
        )
        expect(
          legend.filter((label) => !kept.includes(label)),
          `${panel}: legend ${target.legendFormat}`,
        ).toEqual([])
      }
    } finally {
      upstream.closeAllConnections()
      upstream.close()
    }
  }, 30_000)
})
