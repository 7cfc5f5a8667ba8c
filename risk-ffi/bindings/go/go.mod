module github.com/risk-sdk/risk/bindings/go/risk

go 1.26.8
