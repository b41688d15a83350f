// Package layering holds no code, only the test that keeps the module's imports pointing
// down (docs/architecture.md, "Packages"): every package of the module has a layer, and a
// package imports only packages of lower layers. A new package gets a layer in the test's
// table; an import that points up or sideways fails it.
package layering
