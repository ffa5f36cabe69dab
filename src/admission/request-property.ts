// Where an adapter puts a request's TollgateInfo (`requestPropertyName`): a property name that the
// request objects of Node, Express, Koa and Fastify do not already have.
import { ConfigError } from '../core/errors.js'

/** Names a request object already has (Node's IncomingMessage, Express, Koa's ctx.req, Fastify):
 * `requestPropertyName` must not overwrite them. */
const RESERVED_PROPERTIES = new Set([
  'prototype',
  'headers',
  'rawHeaders',
  'trailers',
  'rawTrailers',
  'socket',
  'connection',
  'url',
  'method',
  'httpVersion',
  'statusCode',
  'statusMessage',
  'complete',
  'aborted',
  'ip',
  'ips',
  'query',
  'params',
  'body',
  'app',
  'res',
  'req',
  'get',
  'header',
  'route',
  'path',
  'baseUrl',
  'originalUrl',
  'hostname',
  'host',
  'protocol',
  'secure',
  'cookies',
  'signedCookies',
  'subdomains',
  'xhr',
  'fresh',
  'stale',
  'server',
  'routeOptions',
  'routerPath',
  'id',
  'log',
  'raw',
  'context',
  'user',
  'session',
  'state',
  'is',
  'accepts',
  'range',
  'emit',
  'on',
  'once',
  'pipe',
  'read',
  'destroy',
])

/** Validate `requestPropertyName` (ConfigError naming it). */
export function requestPropertyOption(value: unknown): string {
  if (
    typeof value !== 'string' ||
    !/^[A-Za-z_$][\w$]{0,63}$/.test(value) ||
    value in Object.prototype ||
    RESERVED_PROPERTIES.has(value)
  ) {
    throw new ConfigError(
      'requestPropertyName',
      'a property name (letters, digits, _ and $) that requests of Node, Express, Koa and Fastify do not already use',
      value,
    )
  }
  return value
}
