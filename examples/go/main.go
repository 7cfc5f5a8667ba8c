// Command risk-example builds an engine from a risk.toml and decides one card transaction
// with the Go binding of the risk SDK.
//
//	cd risk-ffi/bindings/go && go generate   # once: puts librisk_ffi.a where cgo links it
//	cd examples/go && go run . [path/to/risk.toml]
//
// The config path is relative to the current directory (default ../risk.toml, the
// repository's examples/risk.toml); relative paths inside the config resolve against the
// config file's own directory. It prints the decision and exits with status 1 on an error.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/risk-sdk/risk/bindings/go/risk"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "risk-example:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	config := "../risk.toml"
	switch len(args) {
	case 0:
	case 1:
		config = args[0]
	default:
		return errors.New("usage: risk-example [path/to/risk.toml]")
	}

	eng, err := risk.NewFromPath(config)
	if err != nil {
		return fmt.Errorf("engine from %s: %w", config, err)
	}
	defer eng.Close()

	// A card-not-present electronics purchase abroad at 3 am, 4x the card's usual amount:
	// the model (tier fast) scores it into the review band, with SHAP reasons (xgb:...)
	// beside the rules that fired.
	txn := risk.Txn{
		ID: 1, Entity: 42, Amount: 1899.00, Currency: "USD", Country: "NG",
		Channel: risk.ChannelEcom, MCC: 5732,
		Features: map[string]risk.Feature{
			"hour":         risk.Num(3),
			"is_foreign":   risk.Num(1),
			"txn_count_1h": risk.Num(2),
			"amount_ratio": risk.Num(4),
		},
	}
	d, err := eng.Decide(txn)
	if err != nil {
		// errors.Is(err, risk.ErrTransaction): the library refused the transaction; the
		// message names the field.
		return fmt.Errorf("decide transaction %d: %w", txn.ID, err)
	}

	reasons := make([]string, len(d.Reasons))
	for i, r := range d.Reasons {
		reasons[i] = fmt.Sprintf("%s (%.2f)", r.Code, r.Weight)
	}
	if len(reasons) == 0 {
		reasons = []string{"none"}
	}
	fmt.Printf("risk %s, config %s\n", risk.Version(), config)
	fmt.Printf("decision: txn=%d action=%s score=%.3f tier=%s fallback=%s\n",
		d.TxnID, d.Action, d.Score, d.Tier, d.Fallback)
	fmt.Printf("reasons: %s\n", strings.Join(reasons, ", "))
	return nil
}
