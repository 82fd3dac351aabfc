# bash completion for lazyroot(1): commands, subcommands and options.
# tests/integration/man_pages.sh checks that every option of every `--help` is listed here.

_lazyroot_opts() {  # CMD SUB -> the options of that command
	local store='--store --s3-endpoint' cache='--cache' config='--config'
	case $1 in
	build) echo "$store --tag --platform --creds --plain-http --config --min-size --avg-size --max-size --level --threads --pack --sign --json --no-progress --help" ;;
	image) echo "$store $config --from --to --key --expires --json --no-progress --help" ;;
	mount) echo "$config $store $cache --cache-size --cache-memory --readahead --fetch-timeout --suid --dev --no-allow-other --no-passthrough --no-cpu-latency --record-profile --no-profile --socket --trust-key --require-signed --json --help" ;;
	umount) echo "$config $cache --socket --json --help" ;;
	cache)
		case $2 in
		stats) echo "$config $cache --socket --json --prometheus --help" ;;
		prefetch) echo "--profiled --no-profile --decode $config $store $cache --cache-size --fetch-timeout --json --no-progress --socket --help" ;;
		verify) echo "$config $cache --json --help" ;;
		trim) echo "--to $config $cache --json --help" ;;
		*) echo "--help" ;;
		esac ;;
	run) echo "$config $store $cache --images --socket --trust-key --require-signed --rootfs --policy --set --env --workdir --user --bind --hostname --name --memory --pids --cpus --nofile --tmpfs-size --timeout --output-limit --allow --stage --json --json-fd --help" ;;
	policy) echo "--stage --json --fields --help" ;;
	profile) echo "$config $store --json --help" ;;
	gc) echo "$config --pool --json --help" ;;
	store) echo "--grace --dry-run --wait --lease-ttl --data $store --json --help" ;;
	config) echo "--config --defaults --json --help" ;;
	key) echo "--json --help" ;;
	version) echo "--json --help" ;;
	doctor) echo "--json --socket --config --help" ;;
	node) echo "--config $store $cache --images --socket --metrics --cache-size --cache-memory --readahead --fetch-timeout --no-passthrough --no-cpu-latency --log --json --binary --help" ;;
	esac
}

_lazyroot() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	local cmd= sub= i
	COMPREPLY=()
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--) return 0 ;;  # the sandbox's command: leave it to the default completion
		-*) ;;
		*)
			if [ -z "$cmd" ]; then
				cmd=${COMP_WORDS[i]}
			elif [ -z "$sub" ]; then
				sub=${COMP_WORDS[i]}
			fi ;;
		esac
	done
	case $prev in
	--cache|--images|--rootfs)
		mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return 0 ;;
	--policy|--config|--record-profile|--binary|--sign|--key|--trust-key)
		mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return 0 ;;
	--tag|--platform|--min-size|--avg-size|--max-size|--level|--threads|--cache-size|--cache-memory|\
	--readahead|--fetch-timeout|--set|--env|--workdir|--user|--bind|--hostname|--name|--memory|\
	--pids|--cpus|--nofile|--tmpfs-size|--timeout|--output-limit|--allow|--stage|--to|--store|\
	--s3-endpoint|--socket|--metrics|--from|--to|--grace|--lease-ttl|--data|--creds|--json-fd|--expires)
		return 0 ;;
	esac
	if [ -z "$cmd" ]; then
		mapfile -t COMPREPLY < <(compgen -W "build image mount umount cache run policy profile key store gc config node doctor version --help --version" -- "$cur")
		return 0
	fi
	if [[ $cur == -* ]]; then
		mapfile -t COMPREPLY < <(compgen -W "$(_lazyroot_opts "$cmd" "$sub")" -- "$cur")
		return 0
	fi
	if [ -z "$sub" ]; then
		case $cmd in
		image) mapfile -t COMPREPLY < <(compgen -W "ls inspect extract pack rm copy sign" -- "$cur"); return 0 ;;
		store) mapfile -t COMPREPLY < <(compgen -W "gc verify" -- "$cur"); return 0 ;;
		cache) mapfile -t COMPREPLY < <(compgen -W "stats prefetch verify trim" -- "$cur"); return 0 ;;
		profile) mapfile -t COMPREPLY < <(compgen -W "merge push show" -- "$cur"); return 0 ;;
		node) mapfile -t COMPREPLY < <(compgen -W "status stop upgrade" -- "$cur"); return 0 ;;
		key) mapfile -t COMPREPLY < <(compgen -W "generate" -- "$cur"); return 0 ;;
		esac
	fi
	mapfile -t COMPREPLY < <(compgen -f -- "$cur")
}

complete -F _lazyroot lazyroot
