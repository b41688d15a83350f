package main

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func (p *provider) GetMetadata(context.Context, *tfprotov6.GetMetadataRequest) (*tfprotov6.GetMetadataResponse, error) {
	r := &tfprotov6.GetMetadataResponse{}
	for _, n := range sortedKeys(p.resources) {
		r.Resources = append(r.Resources, tfprotov6.ResourceMetadata{TypeName: n})
	}
	for _, n := range sortedKeys(p.data) {
		r.DataSources = append(r.DataSources, tfprotov6.DataSourceMetadata{TypeName: n})
	}
	return r, nil
}

func (p *provider) GetProviderSchema(context.Context, *tfprotov6.GetProviderSchemaRequest) (*tfprotov6.GetProviderSchemaResponse, error) {
	return &tfprotov6.GetProviderSchemaResponse{Provider: p.config, ResourceSchemas: p.resources, DataSourceSchemas: p.data}, nil
}

func (p *provider) GetResourceIdentitySchemas(context.Context, *tfprotov6.GetResourceIdentitySchemasRequest) (*tfprotov6.GetResourceIdentitySchemasResponse, error) {
	return &tfprotov6.GetResourceIdentitySchemasResponse{}, nil
}

func (p *provider) ValidateProviderConfig(_ context.Context, r *tfprotov6.ValidateProviderConfigRequest) (*tfprotov6.ValidateProviderConfigResponse, error) {
	return &tfprotov6.ValidateProviderConfigResponse{PreparedConfig: r.Config}, nil
}

func (p *provider) ConfigureProvider(context.Context, *tfprotov6.ConfigureProviderRequest) (*tfprotov6.ConfigureProviderResponse, error) {
	return &tfprotov6.ConfigureProviderResponse{}, nil
}

func (p *provider) StopProvider(context.Context, *tfprotov6.StopProviderRequest) (*tfprotov6.StopProviderResponse, error) {
	return &tfprotov6.StopProviderResponse{}, nil
}

func (p *provider) ValidateResourceConfig(context.Context, *tfprotov6.ValidateResourceConfigRequest) (*tfprotov6.ValidateResourceConfigResponse, error) {
	return &tfprotov6.ValidateResourceConfigResponse{}, nil
}

func (p *provider) UpgradeResourceState(_ context.Context, r *tfprotov6.UpgradeResourceStateRequest) (*tfprotov6.UpgradeResourceStateResponse, error) {
	s, ok := p.resources[r.TypeName]
	if !ok {
		return &tfprotov6.UpgradeResourceStateResponse{Diagnostics: errDiag("stub: unknown resource %s", r.TypeName)}, nil
	}
	typ := s.ValueType()
	v, err := r.RawState.Unmarshal(typ)
	if err != nil {
		return &tfprotov6.UpgradeResourceStateResponse{Diagnostics: errDiag("stub: state of %s: %v", r.TypeName, err)}, nil
	}
	dv, err := tfprotov6.NewDynamicValue(typ, v)
	return &tfprotov6.UpgradeResourceStateResponse{UpgradedState: &dv}, err
}

func (p *provider) ReadResource(_ context.Context, r *tfprotov6.ReadResourceRequest) (*tfprotov6.ReadResourceResponse, error) {
	return &tfprotov6.ReadResourceResponse{NewState: r.CurrentState, Private: r.Private}, nil
}

// PlanResourceChange proposes what the configuration says and leaves every computed
// attribute the configuration does not set unknown (on create), as providers do.
func (p *provider) PlanResourceChange(_ context.Context, r *tfprotov6.PlanResourceChangeRequest) (*tfprotov6.PlanResourceChangeResponse, error) {
	s, ok := p.resources[r.TypeName]
	if !ok {
		return &tfprotov6.PlanResourceChangeResponse{Diagnostics: errDiag("stub: unknown resource %s", r.TypeName)}, nil
	}
	typ := s.ValueType()
	proposed, err := r.ProposedNewState.Unmarshal(typ)
	if err != nil {
		return nil, err
	}
	prior, err := r.PriorState.Unmarshal(typ)
	if err != nil {
		return nil, err
	}
	planned := proposed
	if !proposed.IsNull() && prior.IsNull() {
		if planned, err = fill(s.Block, proposed, unknown); err != nil {
			return &tfprotov6.PlanResourceChangeResponse{Diagnostics: errDiag("stub: plan %s: %v", r.TypeName, err)}, nil
		}
	}
	dv, err := tfprotov6.NewDynamicValue(typ, planned)
	return &tfprotov6.PlanResourceChangeResponse{PlannedState: &dv}, err
}

// ApplyResourceChange "creates" the resource with placeholders for what was unknown.
func (p *provider) ApplyResourceChange(_ context.Context, r *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	s, ok := p.resources[r.TypeName]
	if !ok {
		return &tfprotov6.ApplyResourceChangeResponse{Diagnostics: errDiag("stub: unknown resource %s", r.TypeName)}, nil
	}
	typ := s.ValueType()
	planned, err := r.PlannedState.Unmarshal(typ)
	if err != nil {
		return nil, err
	}
	if !planned.IsNull() {
		if planned, err = fill(s.Block, planned, placeholder); err != nil {
			return &tfprotov6.ApplyResourceChangeResponse{Diagnostics: errDiag("stub: apply %s: %v", r.TypeName, err)}, nil
		}
	}
	dv, err := tfprotov6.NewDynamicValue(typ, planned)
	return &tfprotov6.ApplyResourceChangeResponse{NewState: &dv}, err
}

func (p *provider) ImportResourceState(_ context.Context, r *tfprotov6.ImportResourceStateRequest) (*tfprotov6.ImportResourceStateResponse, error) {
	return &tfprotov6.ImportResourceStateResponse{Diagnostics: errDiag("stub: cannot import %s", r.TypeName)}, nil
}

func (p *provider) MoveResourceState(_ context.Context, r *tfprotov6.MoveResourceStateRequest) (*tfprotov6.MoveResourceStateResponse, error) {
	return &tfprotov6.MoveResourceStateResponse{Diagnostics: errDiag("stub: cannot move %s", r.TargetTypeName)}, nil
}

func (p *provider) UpgradeResourceIdentity(context.Context, *tfprotov6.UpgradeResourceIdentityRequest) (*tfprotov6.UpgradeResourceIdentityResponse, error) {
	return &tfprotov6.UpgradeResourceIdentityResponse{Diagnostics: errDiag("stub: no resource identities")}, nil
}

func (p *provider) GenerateResourceConfig(context.Context, *tfprotov6.GenerateResourceConfigRequest) (*tfprotov6.GenerateResourceConfigResponse, error) {
	return &tfprotov6.GenerateResourceConfigResponse{Diagnostics: errDiag("stub: cannot generate configuration")}, nil
}

func (p *provider) ValidateDataResourceConfig(context.Context, *tfprotov6.ValidateDataResourceConfigRequest) (*tfprotov6.ValidateDataResourceConfigResponse, error) {
	return &tfprotov6.ValidateDataResourceConfigResponse{}, nil
}

// ReadDataSource answers with the configuration and placeholders for the computed rest.
func (p *provider) ReadDataSource(_ context.Context, r *tfprotov6.ReadDataSourceRequest) (*tfprotov6.ReadDataSourceResponse, error) {
	s, ok := p.data[r.TypeName]
	if !ok {
		return &tfprotov6.ReadDataSourceResponse{Diagnostics: errDiag("stub: unknown data source %s", r.TypeName)}, nil
	}
	typ := s.ValueType()
	cfg, err := r.Config.Unmarshal(typ)
	if err != nil {
		return nil, err
	}
	state, err := fill(s.Block, cfg, placeholder)
	if err != nil {
		return &tfprotov6.ReadDataSourceResponse{Diagnostics: errDiag("stub: read %s: %v", r.TypeName, err)}, nil
	}
	dv, err := tfprotov6.NewDynamicValue(typ, state)
	return &tfprotov6.ReadDataSourceResponse{State: &dv}, err
}

func (p *provider) CallFunction(context.Context, *tfprotov6.CallFunctionRequest) (*tfprotov6.CallFunctionResponse, error) {
	return &tfprotov6.CallFunctionResponse{Error: &tfprotov6.FunctionError{Text: "stub: no functions"}}, nil
}

func (p *provider) GetFunctions(context.Context, *tfprotov6.GetFunctionsRequest) (*tfprotov6.GetFunctionsResponse, error) {
	return &tfprotov6.GetFunctionsResponse{}, nil
}

func (p *provider) ValidateEphemeralResourceConfig(context.Context, *tfprotov6.ValidateEphemeralResourceConfigRequest) (*tfprotov6.ValidateEphemeralResourceConfigResponse, error) {
	return &tfprotov6.ValidateEphemeralResourceConfigResponse{}, nil
}

func (p *provider) OpenEphemeralResource(_ context.Context, r *tfprotov6.OpenEphemeralResourceRequest) (*tfprotov6.OpenEphemeralResourceResponse, error) {
	return &tfprotov6.OpenEphemeralResourceResponse{Diagnostics: errDiag("stub: no ephemeral resources (%s)", r.TypeName)}, nil
}

func (p *provider) RenewEphemeralResource(context.Context, *tfprotov6.RenewEphemeralResourceRequest) (*tfprotov6.RenewEphemeralResourceResponse, error) {
	return &tfprotov6.RenewEphemeralResourceResponse{}, nil
}

func (p *provider) CloseEphemeralResource(context.Context, *tfprotov6.CloseEphemeralResourceRequest) (*tfprotov6.CloseEphemeralResourceResponse, error) {
	return &tfprotov6.CloseEphemeralResourceResponse{}, nil
}

// filler gives the value of a computed attribute left null.
type filler func(name string, t tftypes.Type) tftypes.Value

func unknown(_ string, t tftypes.Type) tftypes.Value {
	return tftypes.NewValue(t, tftypes.UnknownValue)
}

func placeholder(name string, t tftypes.Type) tftypes.Value {
	switch {
	case t.Is(tftypes.String):
		return tftypes.NewValue(t, "stub-"+name)
	case t.Is(tftypes.Number):
		return tftypes.NewValue(t, 0)
	case t.Is(tftypes.Bool):
		return tftypes.NewValue(t, false)
	case t.Is(tftypes.List{}), t.Is(tftypes.Set{}), t.Is(tftypes.Tuple{}):
		return tftypes.NewValue(t, []tftypes.Value{})
	case t.Is(tftypes.Map{}):
		return tftypes.NewValue(t, map[string]tftypes.Value{})
	}
	return tftypes.NewValue(t, nil)
}

// fill replaces each null computed attribute of v (an object of block b), recursively through
// nested blocks; unknown parts are kept as they are.
func fill(b *tfprotov6.SchemaBlock, v tftypes.Value, f filler) (tftypes.Value, error) {
	if v.IsNull() || !v.IsKnown() {
		return v, nil
	}
	var in map[string]tftypes.Value
	if err := v.As(&in); err != nil {
		return v, err
	}
	m := make(map[string]tftypes.Value, len(in)) // As shares v's own map: never write to it
	for k, e := range in {
		m[k] = e
	}
	for _, a := range b.Attributes {
		if cur, ok := m[a.Name]; a.Computed && (!ok || cur.IsNull()) {
			m[a.Name] = f(a.Name, a.Type)
		}
	}
	for _, nb := range b.BlockTypes {
		cur, ok := m[nb.TypeName]
		if !ok || cur.IsNull() || !cur.IsKnown() {
			continue
		}
		switch nb.Nesting {
		case tfprotov6.SchemaNestedBlockNestingModeSingle:
			nv, err := fill(nb.Block, cur, f)
			if err != nil {
				return v, err
			}
			m[nb.TypeName] = nv
		case tfprotov6.SchemaNestedBlockNestingModeList, tfprotov6.SchemaNestedBlockNestingModeSet:
			var in []tftypes.Value
			if err := cur.As(&in); err != nil {
				return v, err
			}
			elems := make([]tftypes.Value, len(in))
			for i, e := range in {
				ne, err := fill(nb.Block, e, f)
				if err != nil {
					return v, err
				}
				elems[i] = ne
			}
			m[nb.TypeName] = tftypes.NewValue(cur.Type(), elems)
		default:
			return v, fmt.Errorf("block %s: nesting %v not supported", nb.TypeName, nb.Nesting)
		}
	}
	return tftypes.NewValue(v.Type(), m), nil
}
