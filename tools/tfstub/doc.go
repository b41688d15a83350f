// Command terraform-provider-stub serves the real schema of a Terraform provider over the
// plugin protocol (v6) without ever calling a cloud, so that `tofu init`, `validate`, `plan`
// and `tofu test` check QuicMQ's Terraform modules offline: argument names, required
// arguments and blocks, types and nesting come from the real provider's schema (rebuilt by
// ./gen from the npm packages CDK for Terraform generates from the providers).
//
// Installed under two names in a filesystem mirror, it is the aws provider when its file name
// contains "aws" and the google provider when it contains "google". Plans mark every
// computed attribute the configuration leaves null as unknown, as a real provider does on
// create; data sources and applies fill such attributes with placeholders ("stub-NAME", 0,
// false, empty collections). It checks nothing a provider checks at run time (allowed values,
// CIDR syntax, quotas): those need the real provider and an account.
//
// Each RPC is served on go-plugin's goroutines; the provider holds only immutable schemas.
package main
