package risk_test

import (
	"fmt"
	"log"

	"github.com/risk-sdk/risk/bindings/go/risk"
)

// The README example (compiled by go vet/test; not run, it needs a config path).
func Example() {
	eng, err := risk.NewFromPath("examples/risk.toml")
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	d, err := eng.Decide(risk.Txn{
		ID: 1, Entity: 42, Amount: 129.90, Currency: "USD", Country: "US",
		Channel: risk.ChannelEcom, MCC: 5411,
		Features: map[string]risk.Feature{"txn_count_1h": risk.Num(3), "hour": risk.Num(23)},
	})
	if err != nil {
		log.Fatal(err) // errors.Is(err, risk.ErrTransaction) for a rejected transaction
	}
	fmt.Println(d.Action, d.Tier, d.Score, d.Reasons)
}
