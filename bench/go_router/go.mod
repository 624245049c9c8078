module benchrouter

go 1.19
