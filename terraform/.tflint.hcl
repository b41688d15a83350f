# tflint's bundled Terraform ruleset (the cloud rulesets cannot be fetched offline).
plugin "terraform" {
  enabled = true
  preset  = "recommended"
}

rule "terraform_documented_variables" {
  enabled = true
}

rule "terraform_naming_convention" {
  enabled = true
}
