// tenant-router in Go: keeps messages whose JSON field `filter_field` equals
// `filter_value` (both optional) and routes each to table
// `<database>.<prefix><tenant>`, the tenant read from the payload field
// `tenant_field` (default "tenant") or else the header of that name. Rows are
// upserts when the sink's table has a primary key, appends otherwise.
package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/iggy-fluss-sink/transforms/go/fluss"
)

func main() {}

func plainIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func init() {
	var (
		mapper                        *fluss.Mapper
		database, prefix, tenantField string
		filterField, filterValue      string
		filtered                      bool
		kind                          uint8
	)
	get := func(config map[string]string, key, fallback string) string {
		if v, ok := config[key]; ok {
			return v
		}
		return fallback
	}
	fluss.Register(fluss.Transform{
		Init: func(config map[string]string, tables []fluss.TableSchema) error {
			table := tables[0]
			database = get(config, "database", strings.SplitN(table.Path, ".", 2)[0])
			prefix = get(config, "prefix", "")
			tenantField = get(config, "tenant_field", "tenant")
			f, hasField := config["filter_field"]
			v, hasValue := config["filter_value"]
			if hasField != hasValue {
				return errors.New("set both `filter_field` and `filter_value`, or neither")
			}
			filterField, filterValue, filtered = f, v, hasField
			kind = fluss.Append
			if len(table.PrimaryKey) > 0 {
				kind = fluss.Upsert
			}
			m, err := fluss.NewMapper(table.Columns)
			mapper = m
			return err
		},
		Handle: func(m *fluss.Message, out *fluss.Output) (uint32, error) {
			if filtered {
				value, ok, err := fluss.FieldText(m.Payload, filterField)
				if err != nil {
					return 0, err
				}
				if !ok || value != filterValue {
					return 0, nil
				}
			}
			tenant, ok, err := fluss.FieldText(m.Payload, tenantField)
			if err != nil {
				return 0, err
			}
			if !ok {
				tenant, ok = m.HeaderText(tenantField)
			}
			if !ok {
				return 0, fmt.Errorf("no tenant: neither a `%s` field nor header", tenantField)
			}
			if !plainIdentifier(tenant) {
				return 0, fmt.Errorf("tenant `%s` is not a plain identifier (letters, digits, _)", tenant)
			}
			table := out.TableIndex(database + "." + prefix + tenant)
			rows, err := mapper.Encode(out.Rows, kind, table, m.Payload)
			out.Rows = rows
			return 1, err
		},
	})
}
