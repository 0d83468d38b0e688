package api

// EveryPage lets a test read ?limit=0 in small pages.
var EveryPage = &everyPage
