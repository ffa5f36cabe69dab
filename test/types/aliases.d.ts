// express4 and koa2 are npm aliases (express@4, koa@2) for smoke tests of the older majors; their
// runtime API is the part of the current types the tests use.
declare module 'express4' {
  import express from 'express'
  export default express
}
declare module 'koa2' {
  import Koa from 'koa'
  export default Koa
}
