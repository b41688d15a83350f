// Package config reads a node's configuration file: what `quicmq node --config FILE` applies
// under its flags and environment, and what `quicmq config check FILE` checks.
//
// The file is HCL (hashicorp/hcl/v2), or its JSON form when the name ends in ".json". HCL
// because the people who deploy QuicMQ write Terraform: the same syntax, comments and
// heredocs, and Terraform can render the file with templatefile or jsonencode without a
// converter. HCL also keeps the position of every value, so each problem is reported as
// file:line:col, and the parser reports every syntax error instead of stopping at the first.
//
// Every key is the name of a `quicmq node` flag with '-' spelt '_' (the flag --wan-join is the
// key wan_join and the environment variable QUICMQ_WAN_JOIN); Keys lists them. Values are
// checked here, where their position is known, and handed to the command as the text the flag
// would have taken (lists joined with commas), so one parser - the flag's - turns them into a
// node.Config and precedence (flag > environment > file > default) is decided in one place.
// Secrets can live in files of their own (token_file, gossip_key_file) so the config file
// itself need not be secret.
//
// The package is pure apart from reading the file and the secret files it names; it starts no
// goroutine.
package config
