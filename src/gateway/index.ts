/**
 * Placeholder: the gateway (a reverse proxy with distributed in-flight limits) arrives with its own
 * issue. Importing `tollgate/gateway` works today; it exports nothing yet.
 */
export {}
