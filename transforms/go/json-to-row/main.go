// json-to-row in Go: each JSON object payload becomes one row of the sink's
// table by column name. Config `kind`: append (default), upsert or delete;
// `partial_update`: "true" leaves fields missing from a payload out of the
// row (a partial update).
package main

import (
	"fmt"

	"github.com/iggy-fluss-sink/transforms/go/fluss"
)

func main() {}

func init() {
	var mapper *fluss.Mapper
	var kind uint8
	fluss.Register(fluss.Transform{
		Init: func(config map[string]string, tables []fluss.TableSchema) error {
			name, ok := config["kind"]
			if !ok {
				name = "append"
			}
			kinds := map[string]uint8{"append": fluss.Append, "upsert": fluss.Upsert, "delete": fluss.Delete}
			k, ok := kinds[name]
			if !ok {
				return fmt.Errorf("config `kind` must be append, upsert or delete, not `%s`", name)
			}
			partial := config["partial_update"]
			if partial != "" && partial != "true" && partial != "false" {
				return fmt.Errorf("config `partial_update` must be true or false, not `%s`", partial)
			}
			m, err := fluss.NewMapper(tables[0].Columns)
			if err != nil {
				return err
			}
			m.Partial = partial == "true"
			mapper, kind = m, k
			return nil
		},
		Handle: func(m *fluss.Message, out *fluss.Output) (uint32, error) {
			rows, err := mapper.Encode(out.Rows, kind, 0, m.Payload)
			out.Rows = rows
			return 1, err
		},
	})
}
