// Secrets and certificates, from a flag's file, the environment or the config file's file (the first
// given wins): the store's password and TLS files, and the admin API's token.
import { readFileSync } from 'node:fs'
import type { GatewayFlags } from './flags.js'
import type { GatewayFile } from './schema.js'
import type { Issues, RedisAuth, RedisTlsConfig } from './types.js'

/** A secret or certificate read from a file; a trailing newline (as `echo` writes) is not part of a secret. */
function readSecret(path: string, label: string, issues: Issues, trim: boolean): string | undefined {
  try {
    const text = readFileSync(path, 'utf8')
    const value = trim ? text.replace(/\r?\n$/, '') : text
    if (value === '') issues.push({ path: label, message: `${path} is empty` })
    return value
  } catch (error) {
    issues.push({
      path: label,
      message: `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    })
    return undefined
  }
}

/** Where a secret (or certificate) may come from, in order: a file's path or the value itself. */
interface SecretSource {
  path?: string | undefined
  value?: string | undefined
  label: string
}

/** The first source given (a flag's file, the environment, the config file's file, as the caller
 * orders them), read, and the label its errors name. */
function firstGiven(
  sources: readonly SecretSource[],
  issues: Issues,
  trim: boolean,
): { value: string | undefined; label: string } | undefined {
  for (const source of sources) {
    if (source.path !== undefined)
      return { value: readSecret(source.path, source.label, issues, trim), label: source.label }
    if (source.value !== undefined) return { value: source.value, label: source.label }
  }
  return undefined
}

/** Password: --redis-password-file (or TOLLGATE_REDIS_PASSWORD_FILE), TOLLGATE_REDIS_PASSWORD, then
 * redis.passwordFile; each over one in the URL. TLS: the flags' files over the file's, field by field. */
export function redisAuth(file: GatewayFile, flags: GatewayFlags, issues: Issues): RedisAuth {
  const redis = file.redis ?? {}
  const password = firstGiven(
    [
      { path: flags.redisPasswordFile, label: '--redis-password-file' },
      { value: flags.redisPassword, label: 'TOLLGATE_REDIS_PASSWORD' },
      { path: redis.passwordFile, label: 'redis.passwordFile' },
    ],
    issues,
    true,
  )?.value
  const t = redis.tls ?? {}
  const pem = (flag: string | undefined, flagLabel: string, own: string | undefined, ownLabel: string) =>
    firstGiven(
      [
        { path: flag, label: flagLabel },
        { path: own, label: ownLabel },
      ],
      issues,
      false,
    )?.value
  const tls: RedisTlsConfig = {
    ca: pem(flags.redisTlsCa, '--redis-tls-ca', t.ca, 'redis.tls.ca'),
    cert: pem(flags.redisTlsCert, '--redis-tls-cert', t.cert, 'redis.tls.cert'),
    key: pem(flags.redisTlsKey, '--redis-tls-key', t.key, 'redis.tls.key'),
    servername: flags.redisTlsServername ?? t.servername,
  }
  if ((tls.cert === undefined) !== (tls.key === undefined) && issues.length === 0) {
    issues.push({
      path: tls.cert ? '--redis-tls-key' : '--redis-tls-cert',
      message: 'a client certificate needs both cert and key',
    })
  }
  const anyTls = Object.values(tls).some((value) => value !== undefined) || redis.tls !== undefined
  return { password, tls: anyTls ? tls : undefined }
}

/** The admin API's bearer token: --admin-token-file (or TOLLGATE_ADMIN_TOKEN_FILE), TOLLGATE_ADMIN_TOKEN,
 * then admin.tokenFile. At least 16 characters: it guards changing every replica's limits. */
export function adminToken(
  flags: GatewayFlags,
  tokenFile: string | undefined,
  issues: Issues,
): string | undefined {
  const given = firstGiven(
    [
      { path: flags.adminTokenFile, label: '--admin-token-file' },
      { value: flags.adminToken, label: 'TOLLGATE_ADMIN_TOKEN' },
      { path: tokenFile, label: 'admin.tokenFile' },
    ],
    issues,
    true,
  )
  const token = given?.value
  if (token !== undefined && token !== '' && !/^[\x21-\x7e]{16,4096}$/.test(token)) {
    issues.push({
      path: given!.label,
      message: 'expected a token of 16 to 4096 printable characters without spaces',
    })
    return undefined
  }
  return token
}
