package main

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func attr(t *testing.T, b *tfprotov6.SchemaBlock, name string) *tfprotov6.SchemaAttribute {
	t.Helper()
	for _, a := range b.Attributes {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no attribute %s", name)
	return nil
}

func nested(t *testing.T, b *tfprotov6.SchemaBlock, name string) *tfprotov6.SchemaNestedBlock {
	t.Helper()
	for _, nb := range b.BlockTypes {
		if nb.TypeName == name {
			return nb
		}
	}
	t.Fatalf("no block %s", name)
	return nil
}

// The schemas carry what the real providers say about the resources the modules use.
func TestSchemas(t *testing.T) {
	aws, err := load("aws")
	if err != nil {
		t.Fatal(err)
	}
	if len(aws.resources) < 1500 || len(aws.data) < 600 {
		t.Errorf("aws: %d resources, %d data sources", len(aws.resources), len(aws.data))
	}
	inst := aws.resources["aws_instance"].Block
	if a := attr(t, inst, "instance_type"); !a.Optional || !a.Computed || !a.Type.Is(tftypes.String) {
		t.Errorf("aws_instance.instance_type: %+v", a)
	}
	if a := attr(t, inst, "arn"); a.Optional || !a.Computed {
		t.Errorf("aws_instance.arn: %+v", a)
	}
	if a := attr(t, inst, "vpc_security_group_ids"); !a.Type.Is(tftypes.Set{ElementType: tftypes.String}) {
		t.Errorf("aws_instance.vpc_security_group_ids: %v", a.Type)
	}
	if nb := nested(t, inst, "root_block_device"); nb.Nesting != tfprotov6.SchemaNestedBlockNestingModeList || nb.MaxItems != 1 {
		t.Errorf("aws_instance.root_block_device: %+v", nb)
	}
	if a := attr(t, aws.resources["aws_vpc_security_group_ingress_rule"].Block, "ip_protocol"); !a.Required {
		t.Errorf("ingress rule ip_protocol: %+v", a)
	}

	google, err := load("google")
	if err != nil {
		t.Fatal(err)
	}
	gi := google.resources["google_compute_instance"].Block
	for _, n := range []string{"machine_type", "name"} {
		if a := attr(t, gi, n); !a.Required {
			t.Errorf("google_compute_instance.%s: %+v", n, a)
		}
	}
	if nb := nested(t, gi, "boot_disk"); nb.MinItems != 1 || nb.MaxItems != 1 {
		t.Errorf("google_compute_instance.boot_disk: %+v", nb)
	}
	if nb := nested(t, google.resources["google_compute_firewall"].Block, "allow"); nb.Nesting != tfprotov6.SchemaNestedBlockNestingModeSet {
		t.Errorf("google_compute_firewall.allow: %+v", nb)
	}
}

// A plan leaves computed attributes the configuration does not set unknown; apply fills them.
func TestFill(t *testing.T) {
	b := &tfprotov6.SchemaBlock{
		Attributes: []*tfprotov6.SchemaAttribute{
			{Name: "name", Type: tftypes.String, Required: true},
			{Name: "id", Type: tftypes.String, Computed: true, Optional: true},
			{Name: "ips", Type: tftypes.List{ElementType: tftypes.String}, Computed: true},
		},
		BlockTypes: []*tfprotov6.SchemaNestedBlock{{TypeName: "disk", Nesting: tfprotov6.SchemaNestedBlockNestingModeList,
			Block: &tfprotov6.SchemaBlock{Attributes: []*tfprotov6.SchemaAttribute{{Name: "size", Type: tftypes.Number, Computed: true}}}}},
	}
	typ := b.ValueType()
	diskT := typ.(tftypes.Object).AttributeTypes["disk"]
	elemT := diskT.(tftypes.List).ElementType
	v := tftypes.NewValue(typ, map[string]tftypes.Value{
		"name": tftypes.NewValue(tftypes.String, "n"),
		"id":   tftypes.NewValue(tftypes.String, nil),
		"ips":  tftypes.NewValue(tftypes.List{ElementType: tftypes.String}, nil),
		"disk": tftypes.NewValue(diskT, []tftypes.Value{tftypes.NewValue(elemT, map[string]tftypes.Value{"size": tftypes.NewValue(tftypes.Number, nil)})}),
	})
	planned, err := fill(b, v, unknown)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]tftypes.Value
	planned.As(&m)
	if m["id"].IsKnown() || m["ips"].IsKnown() || !m["name"].IsKnown() {
		t.Errorf("planned: %v", planned)
	}
	var disks []tftypes.Value
	m["disk"].As(&disks)
	var disk map[string]tftypes.Value
	disks[0].As(&disk)
	if disk["size"].IsKnown() {
		t.Errorf("nested computed attribute known: %v", disks[0])
	}
	applied, err := fill(b, v, placeholder)
	if err != nil {
		t.Fatal(err)
	}
	var am map[string]tftypes.Value
	applied.As(&am)
	var id string
	if err := am["id"].As(&id); err != nil || id != "stub-id" {
		t.Errorf("applied id %q %v", id, err)
	}
}
